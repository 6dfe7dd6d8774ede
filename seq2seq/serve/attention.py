"""The page's heat map: the cross-attention that `seq2seq-translate attention=DIR` draws (last decoder
layer, mean of the heads), as numbers for the browser to draw.

It comes from one teacher-forced pass of the PyTorch model over the translation the server gave
(`sentence_attention` of seq2seq.inference.attention_plots), run in the worker thread that owns the
engines (a CTranslate2 server loads its run's PyTorch weights for it on first use).
"""

from __future__ import annotations

from typing import Any

from seq2seq.serve.engines import Engines


def cross_attention(
    engines: Engines, line: str, out_ids: list[int], src_lang: str | None = None, tgt_lang: str | None = None
) -> dict[str, Any]:
    """{"source": source pieces + </s>, "output": output pieces + </s>, "weights": a row per output piece}.
    `src_lang`, `tgt_lang`: a multilingual model's direction (its tag is part of what the model read)."""
    from seq2seq.inference.attention_plots import sentence_attention  # torch and matplotlib: on first use

    translator = engines.torch()
    if tgt_lang is not None:
        translator = translator.with_languages(src_lang, tgt_lang)
    sample = sentence_attention(translator, line, out_ids)
    cross = sample.weights["cross"][-1].mean(dim=0)  # (output tokens + </s>, source tokens + </s>)
    return {"source": sample.source, "output": sample.output, "weights": cross.tolist()}
