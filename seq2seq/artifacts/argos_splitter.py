"""The sentence splitter an Argos package carries: `minisbd/<source>.onnx`, a MiniSBD model that keeps
each text (each line: Argos splits paragraphs at newlines first) as one sentence.

argostranslate 1.11 splits every text into sentences before translating, with a MiniSBD model it
downloads from GitHub on first use (LibreTranslate/MiniSBD's releases) unless the package holds one
under minisbd/: offline that download ends `argostranslate.translate` in a URLError. This model needs
no download, and it splits as seq2seq-translate reads its input, one line one sentence, so Argos's
lines are the command's. It is MiniSBD's format (an ONNX graph and its settings as metadata), with
every character scored "no break": MiniSBD ends the last sentence at the text's end on its own.
"""

from __future__ import annotations

import json

from seq2seq.config import UserError

LABELS = 5  # MiniSBD's classes per character: 0 no break, 1 token end, 2 sentence end, 3-4 the same in MWTs
OPSET = 13  # ONNX operator set: Unsqueeze with its axes as an input; onnxruntime 1.14 and later run it


def folder_file(source_lang: str) -> str:
    """Where in the package: Argos reads the first .onnx file of minisbd/."""
    return f"minisbd/{source_lang}.onnx"


def line_splitter(source_lang: str) -> bytes:
    """The serialized model. Its inputs are MiniSBD's (`units`: character ids (B, T), `features`:
    (B, T, F)); its output, (B, T, 5) zeros, is "no break" for every character."""
    try:
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as err:
        raise UserError(
            f"format=argos writes a sentence splitter in ONNX and needs the onnx package ({err}); "
            "pip install seq2seq[export]"
        ) from err
    inputs = [
        helper.make_tensor_value_info("units", TensorProto.INT64, ["batch", "chars"]),
        helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "chars", "features"]),
    ]
    output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "chars", LABELS])
    constants = [
        numpy_helper.from_array(np.zeros(LABELS, np.float32), "no_break"),
        numpy_helper.from_array(np.array([2], np.int64), "last_axis"),
    ]
    nodes = [  # units (B, T) -> (B, T, 1) -> x zeros (5,) -> (B, T, 5)
        helper.make_node("Unsqueeze", ["units", "last_axis"], ["units_3d"]),
        helper.make_node("Cast", ["units_3d"], ["units_float"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["units_float", "no_break"], ["logits"]),
    ]
    graph = helper.make_graph(nodes, "one_sentence_per_line", inputs, [output], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="seq2seq")
    model.ir_version = 8  # what onnxruntime releases of the last years read
    onnx.helper.set_model_props(model, _settings(source_lang))
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _settings(source_lang: str) -> dict[str, str]:
    """MiniSBD's settings, which it reads from the model's metadata: no character features, and a
    vocabulary of its four reserved units only (every character is unknown: the model reads none)."""
    reserved = ["<PAD>", "<UNK>", "<EMPTY>", "<ROOT>"]
    vocab = {"lang": source_lang, "idx": 0, "cutoff": 0, "lower": False}
    vocab |= {"_unit2id": {unit: i for i, unit in enumerate(reserved)}, "_id2unit": reserved}
    config = {"feat_funcs": [], "max_seqlen": 1000, "batch_size": 32, "use_dictionary": False}
    return {"lang_code": source_lang, "config": json.dumps(config), "vocab": json.dumps(vocab), "lexicon": "null"}
