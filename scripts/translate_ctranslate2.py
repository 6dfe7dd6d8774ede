"""Translate with a CTranslate2 model directory written by `seq2seq-export format=ctranslate2`, decoding
as `seq2seq-translate` does: a Unix filter, one output line per input line.

    python scripts/translate_ctranslate2.py model-ct2 --beam 5 < test.en > hyp.de

It imports neither torch nor seq2seq (only ctranslate2 and tokenizers), so it starts in a fraction of
a second. The search options that make CTranslate2 decode as `seq2seq.search` does:
- our output budget is per sentence, `max_len_a * (source tokens + </s>) + max_len_b` with </s>
  included, while CTranslate2's `max_decoding_length` is per call and excludes </s>: sentences are
  grouped by budget, one call per group;
- `min_decoding_length=0`: an immediate </s> (an empty translation) is allowed, as in ours;
- `<pad>` and `<s>` are never output, as in ours.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ctranslate2
from tokenizers import Tokenizer


def load_tokenizers(directory: Path) -> tuple[Tokenizer, Tokenizer]:
    """(source, target): tokenizer.json for a joint vocabulary, else tokenizer.src.json + tokenizer.tgt.json."""
    if (directory / "tokenizer.json").is_file():
        joint = Tokenizer.from_file(str(directory / "tokenizer.json"))
        return joint, joint
    return (
        Tokenizer.from_file(str(directory / "tokenizer.src.json")),
        Tokenizer.from_file(str(directory / "tokenizer.tgt.json")),
    )


# What seq2seq-translate writes in place of a line break inside a translation (a byte-level
# vocabulary can output one): every character str.splitlines() breaks at becomes a space. The same
# table as seq2seq/inference/command.py's (a test checks), copied because this script imports no seq2seq.
_BREAKS = "\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029"
LINE_BREAKS = str.maketrans(_BREAKS, " " * len(_BREAKS))


def cut_to_positions(tokens: list[str], max_positions: int, number: int) -> list[str]:
    """A source longer than the model's positions (</s> included) is cut, with a warning naming the
    line, as seq2seq-translate does; CTranslate2's max_input_length would cut it silently."""
    if len(tokens) + 1 > max_positions:
        print(
            f"warning: input line {number} has {len(tokens)} tokens, more than the model's {max_positions} "
            f"positions: translating its first {max_positions - 1}",
            file=sys.stderr,
        )
    return tokens[: max_positions - 1]


def translate(
    translator: ctranslate2.Translator,
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    lines: list[str],
    args: argparse.Namespace,
    first_line_number: int = 1,
) -> list[str]:
    sources = [
        cut_to_positions(
            src_tok.encode(line, add_special_tokens=False).tokens, args.max_positions, first_line_number + i
        )
        for i, line in enumerate(lines)
    ]
    budgets = [min(int((len(s) + 1) * args.max_len_a + args.max_len_b), args.max_positions) for s in sources]
    outputs = [""] * len(lines)
    for budget in sorted(set(budgets)):
        rows = [i for i, b in enumerate(budgets) if b == budget and sources[i]]
        if not rows:
            continue
        results = translator.translate_batch(
            [sources[i] for i in rows],
            beam_size=args.beam,
            length_penalty=args.length_penalty,
            max_batch_size=args.batch_size,
            max_decoding_length=budget - 1,
            min_decoding_length=0,
            max_input_length=args.max_positions,
            suppress_sequences=[["<pad>"], ["<s>"]],
        )
        for i, result in zip(rows, results, strict=True):
            ids = [tgt_tok.token_to_id(t) for t in result.hypotheses[0]]
            outputs[i] = tgt_tok.decode(ids, skip_special_tokens=True).translate(LINE_BREAKS)
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a directory written by seq2seq-export format=ctranslate2")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--length-penalty", type=float, default=1.0)
    parser.add_argument("--max-len-a", type=float, default=1.5)
    parser.add_argument("--max-len-b", type=int, default=10)
    parser.add_argument("--max-positions", type=int, default=256, help="model.max_positions (the export prints it)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="0: CTranslate2's default")
    parser.add_argument("--compute-type", default="default", help="e.g. float32, int8 (default: as exported)")
    args = parser.parse_args()
    if not (args.model / "model.bin").is_file():
        raise SystemExit(f"error: {args.model}: no model.bin (write one with seq2seq-export format=ctranslate2)")
    src_tok, tgt_tok = load_tokenizers(args.model)
    translator = ctranslate2.Translator(
        str(args.model), device="cpu", compute_type=args.compute_type, intra_threads=args.threads
    )
    lines = [line.rstrip("\r\n") for line in sys.stdin]
    # Small first chunk: its lines are out quickly; then large chunks, which batch well.
    start = 0
    for size in [16] + [1000] * (len(lines) // 1000 + 1):
        chunk = lines[start : start + size]
        if not chunk:
            break
        translations = translate(translator, src_tok, tgt_tok, chunk, args, start + 1)
        sys.stdout.write("".join(t + "\n" for t in translations))
        sys.stdout.flush()
        start += size


if __name__ == "__main__":
    main()
