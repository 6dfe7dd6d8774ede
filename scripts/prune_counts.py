"""What data.prune_vocab saves on NLLB-200-distilled-600M fine-tuned on Multi30k en-de: counts, not times.
Counts the ids the run keeps (seq2seq.data.vocab_pruning, on Multi30k's en-de training and validation
lines, with the special tokens and eng_Latn, deu_Latn), then the parameters of the 600M architecture
(scripts/bench_nllb_shapes.py's config, built on the meta device: no memory, no weights) with the whole
vocabulary and with the kept one, and what they weigh. Prints one JSON object.

    python scripts/prune_counts.py --model nllb-200-distilled-600M   # the real tokenizer, where downloaded
    python scripts/prune_counts.py                                    # a stand-in tokenizer (below)

Without --model (no Hub here) the ids are counted with a stand-in: a SentencePiece BPE model of
--standin-pieces pieces trained on Multi30k's four languages (en, de, fr, cs), under NllbTokenizer's
numbering and language codes. It is not NLLB's 256k-piece model of 200 languages: its count says how
the figures go, not what the real tokenizer keeps (that is --model's).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_nllb_shapes import NLLB_600M  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAINING_BYTES_PER_PARAMETER = 16  # fp32 weight, gradient and Adam's two moments


def lines(directory: Path, split: str, lang: str) -> list[str]:
    with gzip.open(directory / f"{split}.{lang}.gz", "rt", encoding="utf-8") as handle:
        return [line.strip() for line in handle]


def standin_model(directory: Path, multi30k: Path, pieces: int) -> Path:
    """An NLLB-style tokenizer directory over a SentencePiece BPE trained on Multi30k's four languages."""
    import sentencepiece
    import transformers
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    text = [line for lang in ("en", "de", "fr", "cs") for line in lines(multi30k, "train", lang)]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_prefix=str(directory / "sentencepiece.bpe"),
        vocab_size=pieces,
        model_type="bpe",
        hard_vocab_limit=False,
        minloglevel=2,
    )
    tokenizer = transformers.NllbTokenizer.from_pretrained(
        str(directory), additional_special_tokens=FAIRSEQ_LANGUAGE_CODES
    )
    tokenizer.save_pretrained(str(directory))
    (directory / "config.json").write_text(json.dumps({"vocab_size": len(tokenizer)}), encoding="utf-8")
    return directory


def kept_ids(model: Path, multi30k: Path) -> dict:
    from seq2seq.data.fairseq_vocab import FairseqTokenizers
    from seq2seq.data.vocab_pruning import prune_to_corpus

    tokenizers = FairseqTokenizers.of_huggingface(model)
    texts = [line for split in ("train", "val") for lang in ("en", "de") for line in lines(multi30k, split, lang)]
    codes = [tokenizers.src.ids[code] for code in ("eng_Latn", "deu_Latn")]
    record = prune_to_corpus(tokenizers, texts, [(codes[:1], codes[1:])], model).src.pruned
    return {"tokenizer_rows": record["rows"], "kept": len(record["ids"]), "counts": record["counts"]}


def shape_counts(vocab: int) -> dict:
    """The 600M architecture with `vocab` rows: its parameters, the embedding's (tied to the output layer),
    their bytes, and the output layer's multiply-adds per target token."""
    from transformers import M2M100Config

    from seq2seq.artifacts.m2m100 import model_config
    from seq2seq.data.tokenizer import PAD_ID
    from seq2seq.model.transformer import build_model

    shape = {**NLLB_600M, "vocab_size": vocab}
    with torch.device("meta"):
        model = build_model(model_config(M2M100Config(**shape), "nllb-600M shape"), vocab, vocab, PAD_ID)
    parameters = sum(p.numel() for p in model.parameters())
    embedding = model.output.weight.numel()
    return {
        "vocab": vocab,
        "parameters": parameters,
        "embedding_parameters": embedding,
        "embedding_mb_fp32": round(embedding * 4 / 1e6, 1),
        "embedding_mb_bf16": round(embedding * 2 / 1e6, 1),
        "training_state_gb_fp32_adam": round(parameters * TRAINING_BYTES_PER_PARAMETER / 1e9, 2),
        "output_layer_macs_per_target_token": embedding,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="an NLLB-200 directory (its tokenizer is read, not its weights)")
    parser.add_argument("--multi30k", type=Path, default=ROOT / "data" / "multi30k")
    parser.add_argument("--standin-pieces", type=int, default=32000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model or standin_model(Path(scratch), args.multi30k, args.standin_pieces)
        kept = kept_ids(model, args.multi30k)
    full, pruned = shape_counts(NLLB_600M["vocab_size"]), shape_counts(kept["kept"])
    result = {
        "tokenizer": str(args.model)
        if args.model
        else f"stand-in: SentencePiece BPE, {args.standin_pieces} pieces, Multi30k en+de+fr+cs (not NLLB's)",
        "corpus": "Multi30k en-de train + val",
        **kept,
        "nllb_600m_whole_vocabulary": full,
        "nllb_600m_pruned": pruned,
        "parameters_saved": full["parameters"] - pruned["parameters"],
        "parameter_share_kept": round(pruned["parameters"] / full["parameters"], 3),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
