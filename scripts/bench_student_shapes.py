"""How fast would a student of this shape decode? Times CTranslate2 exports of untrained models of each
shape asked for, beside the teacher's own shape, before any student is trained; prints one JSON object.

    python scripts/bench_student_shapes.py --teacher outputs/reproduce/multi30k_en_de \
        --sources data/multi30k/test_2016_flickr.en.gz \
        --corpus data/multi30k/train.en.gz data/multi30k/train.de.gz \
        --shape d_model=96,decoder_layers=1,vocab=4000 --shape d_model=64,decoder_layers=1

Speed does not depend on what the weights are, only on the shapes and on how many tokens each line
decodes: so each line is decoded (beam 5, batches of up to 32 lines of similar length, as the
CTranslate2 engine batches them) to exactly as many tokens as the teacher's own translation of it has in
that shape's vocabulary, with random weights. A shape names any of d_model, heads, ffn_dim,
encoder_layers, decoder_layers and vocab; the rest are the teacher's. A shape with another vocabulary
size gets a tokenizer of the teacher's kind trained on --corpus, as a student of that data.vocab_size
would. Run it on an idle machine; the ratio to the teacher's row is what carries over to trained
models (a trained student's lines end where its own translations end).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

from seq2seq import decoding_defaults  # noqa: E402

SHAPE_KEYS = ("d_model", "heads", "ffn_dim", "encoder_layers", "decoder_layers", "vocab")
BEAM = decoding_defaults.BEAM  # the teacher decodes as seq2seq-distill does
BATCH_LINES = 32  # CTranslate2Translator's batches on a CPU (seq2seq/inference/ctranslate2_engine.py)


def parse_shape(text: str) -> dict[str, int]:
    """ "d_model=96,decoder_layers=1" -> {"d_model": 96, "decoder_layers": 1}."""
    shape = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key not in SHAPE_KEYS or not value.isdigit() or int(value) <= 0:
            raise SystemExit(f"--shape {text}: {item!r} is not KEY=N with KEY one of {', '.join(SHAPE_KEYS)}")
        shape[key] = int(value)
    return shape


def student_tokenizers(teacher_data: dict[str, Any], vocab: int, corpus: list[Path], directory: Path) -> Any:
    """The tokenizers a student of data.vocab_size=`vocab` trains (the teacher's kind, layout and language
    tags), on `corpus`, as training makes them."""
    from seq2seq.config import DataConfig
    from seq2seq.data.corpus import iter_lines
    from seq2seq.data.corpus_plan import TokenizerPlan
    from seq2seq.data.pipeline import train_tokenizers

    known = {k: v for k, v in teacher_data.items() if k in DataConfig.__dataclass_fields__}
    cfg = DataConfig(**{**known, "vocab_size": vocab})
    return train_tokenizers(TokenizerPlan.of(cfg), iter_lines(corpus[0]), iter_lines(corpus[1]), directory)


def export_random(payload: dict[str, Any], model_cfg: Any, tokenizers: Any, out: Path) -> int:
    """Writes an untrained model of `model_cfg` as a CTranslate2 export with `tokenizers` (the rest of the
    export's record, the languages, from the teacher's `payload`); returns its number of parameters."""
    from seq2seq.artifacts.ctranslate2_model import ctranslate2_writer
    from seq2seq.data.tokenizer import PAD
    from seq2seq.model.transformer import build_model

    src_size, tgt_size = tokenizers.src.get_vocab_size(), tokenizers.tgt.get_vocab_size()
    model = build_model(model_cfg, src_size, tgt_size, tokenizers.tgt.token_to_id(PAD))
    out.mkdir(parents=True)
    ctranslate2_writer({**payload, "model": model.state_dict()}, model_cfg, tokenizers, out, None)(out)
    return sum(p.numel() for p in model.parameters())


def lines_per_second(
    model_dir: Path, sources: list[list[str]], lengths: list[int], threads: int, compute_type: str, repeats: int
) -> float:
    """The best of `repeats` passes; each batch decodes exactly its longest line's teacher length."""
    import ctranslate2

    translator = ctranslate2.Translator(str(model_dir), intra_threads=threads, compute_type=compute_type)
    order = sorted(range(len(sources)), key=lambda i: (len(sources[i]), lengths[i]))
    batches = [order[i : i + BATCH_LINES] for i in range(0, len(order), BATCH_LINES)]
    seconds = []
    for _ in range(repeats + 1):
        began = time.perf_counter()
        for rows in batches:
            length = max(lengths[i] for i in rows)
            translator.translate_batch(
                [sources[i] for i in rows], beam_size=BEAM, min_decoding_length=length, max_decoding_length=length
            )
        seconds.append(time.perf_counter() - began)
    best = min(seconds[1:])  # the first pass warms up (allocations) and is not counted
    return round(len(sources) / best, 1)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", required=True, type=Path, help="a run directory")
    parser.add_argument("--sources", required=True, type=Path, help="source lines (plain or .gz)")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--corpus", nargs=2, type=Path, metavar=("SRC", "TGT"), help="for shapes with vocab=")
    parser.add_argument("--shape", action="append", default=[], help="KEY=N,...: see the docstring")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compute-types", default="float32", help="comma-separated CTranslate2 compute types")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    shapes = [{}] + [parse_shape(s) for s in args.shape]  # the teacher's own shape first
    if any("vocab" in s for s in shapes) and args.corpus is None:
        raise SystemExit("--shape ...vocab=N...: give --corpus SRC TGT to train that shape's tokenizer on")

    from seq2seq.artifacts.checkpoint import load_checkpoint, model_config_of
    from seq2seq.artifacts.model_files import load_tokenizers
    from seq2seq.artifacts.run_dir import RunDir
    from seq2seq.data.corpus import iter_lines
    from seq2seq.inference import load

    checkpoint = RunDir(args.teacher).find_checkpoint()
    payload = load_checkpoint(checkpoint)
    teacher_data = payload.get("config", {}).get("data", {})
    teacher_cfg = model_config_of(payload.get("config", {}).get("model"), checkpoint)
    teacher_tokenizers = load_tokenizers(checkpoint, str(args.teacher), teacher_data)
    texts = list(islice(iter_lines(args.sources), args.lines))
    translations = load(str(args.teacher), beam=BEAM).translate(texts)

    rows = []
    with tempfile.TemporaryDirectory() as work:
        for number, shape in enumerate(shapes):
            sizes = {k: v for k, v in shape.items() if k != "vocab"}
            model_cfg = dataclasses.replace(teacher_cfg, **sizes)
            tokenizers = teacher_tokenizers
            if "vocab" in shape:
                tokenizers = student_tokenizers(teacher_data, shape["vocab"], args.corpus, Path(work) / f"tok{number}")
            out = Path(work) / f"shape{number}"
            parameters = export_random(payload, model_cfg, tokenizers, out)
            sources = [tokenizers.src_tokens(text) for text in texts]
            lengths = [len(ids) for ids in tokenizers.encode_tgt(translations)]
            row = {
                "shape": {k: getattr(model_cfg, k) for k in SHAPE_KEYS if k != "vocab"}
                | {"vocab": tokenizers.tgt.get_vocab_size()},
                "parameters": parameters,
                "target_tokens_per_line": round(sum(lengths) / len(lengths), 2),
                "lines_per_second": {
                    kind: lines_per_second(out, sources, lengths, args.threads, kind, args.repeats)
                    for kind in args.compute_types.split(",")
                },
            }
            rows.append(row)
    for row in rows:
        row["speedup"] = {k: round(v / rows[0]["lines_per_second"][k], 2) for k, v in row["lines_per_second"].items()}
    result = {
        "teacher": str(args.teacher),
        "lines": len(texts),
        "beam": BEAM,
        "threads": args.threads,
        "rows": rows,
        "machine": machine_info(),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
