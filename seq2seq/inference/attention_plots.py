"""Attention heatmaps with token labels, for TensorBoard (training) and `seq2seq-translate attention=DIR`.

The weights come from one teacher-forced pass over <s> + output tokens: thanks to the causal mask,
row t sees exactly the prefix that decoding step t saw, so its cross-attention is the one that chose
output token t. Row labels are therefore the tokens each row produced (output tokens + </s>).

Figures are drawn on matplotlib's Agg canvas without pyplot, so no global backend is switched and
nothing is kept alive after a figure is rendered. This module is imported only when plots are wanted.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import ScaledTranslation, Transform

from seq2seq.artifacts.replacing import write_new_file
from seq2seq.config import UserError
from seq2seq.data.tokenizer import BOS, BOS_ID, EOS, EOS_ID, PAD, decoder_start_id
from seq2seq.inference.translator import Translator
from seq2seq.model.layers import AttentionRecord
from seq2seq.model.transformer import Transformer

log = logging.getLogger(__name__)
KINDS = ("encoder", "decoder_self", "cross")
MAX_LABEL_CHARS = 12
DPI = 100


@dataclass
class SentenceAttention:
    """One sentence's attention weights, kind -> one (heads, rows, columns) tensor per layer, and
    the token labels of the rows and columns."""

    weights: dict[str, list[torch.Tensor]]
    source: list[str]  # source pieces + </s>: what the encoder saw
    decoder_input: list[str]  # <s> + output pieces: what the decoder was fed
    output: list[str]  # output pieces + </s>: what each decoder row produced

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(column labels, row labels) of the maps of `kind`."""
        if kind == "encoder":
            return self.source, self.source
        if kind == "decoder_self":
            return self.decoder_input, self.output
        return self.source, self.output


@torch.inference_mode()
def teacher_forced_attention(
    model: Transformer, src_ids: list[int], out_ids: list[int]
) -> dict[str, list[torch.Tensor]]:
    """Attention weights of one sentence: src_ids include the final EOS, out_ids have neither BOS
    nor EOS. Returns kind -> per layer (heads, rows, columns) float32 CPU tensors."""
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], dtype=torch.long, device=device)
    start = decoder_start_id(model.cfg.decoder_start)  # BOS, or pad for a Marian model
    tgt_in = torch.tensor([[start, *out_ids]], dtype=torch.long, device=device)
    record: AttentionRecord = {}
    was_training = model.training
    model.eval()  # dropout off: the weights are the ones translation uses
    try:
        memory, src_mask = model.encode(src, record)
        model.decode(tgt_in, memory, src_mask, record=record)
    finally:
        model.train(was_training)
    return {kind: [w[0].float().cpu() for w in layers] for kind, layers in record.items()}


def sentence_attention(translator: Translator, source: str, out_ids: list[int]) -> SentenceAttention:
    """Weights and labels for `source` translated as `out_ids` (Translation.tokens)."""
    tokenizers = translator.tokenizers
    # As Translator.encode reads it (a tag written at its start removed, a source_prefix tag first, cut
    # to the model's positions), so the plot shows the source the model actually read.
    source = translator.languages.split_tag(source)[1]
    keep = translator.max_positions - 1
    tag = [
        tokenizers.src.id_to_token(i)
        for i in translator.languages.source_tag(translator.settings.tgt_lang, translator.settings.src_lang)
    ]
    src_ids = [
        *[
            *translator.languages.source_tag(translator.settings.tgt_lang, translator.settings.src_lang),
            *tokenizers.encode_src([source])[0],
        ][:keep],
        EOS_ID,
    ]
    pieces = tokenizers.tgt_tokens(out_ids)
    return SentenceAttention(
        weights=teacher_forced_attention(translator.model, src_ids, out_ids),
        source=[*[*tag, *tokenizers.src_tokens(source)][:keep], EOS],
        decoder_input=[BOS if translator.start_id == BOS_ID else PAD, *pieces],
        output=[*pieces, EOS],
    )


def translate_with_attention(translator: Translator, sources: list[str]) -> list[SentenceAttention]:
    """Translate `sources` (as the translator is set up) and collect each one's attention."""
    results = translator.translate_nbest(sources)
    return [sentence_attention(translator, s, nbest[0].tokens) for s, nbest in zip(sources, results, strict=True)]


# ---- drawing ------------------------------------------------------------------------------------


def _label(piece: str) -> str:
    # '$' would switch matplotlib to mathtext and fail on unbalanced pieces.
    if len(piece) > MAX_LABEL_CHARS:
        piece = piece[: MAX_LABEL_CHARS - 1] + "…"
    return piece.replace("$", r"\$")


def _tile_inches(count: int) -> float:
    """Side of one heatmap: grows with the tokens, capped so long sentences stay a sane size."""
    return min(max(0.16 * count, 1.6), 8.0)


def _font_size(cell_inches: float) -> float:
    """Labels shrink once the tokens no longer fit at 8 pt; long sentences are drawn anyway."""
    return min(max(0.75 * cell_inches * 72, 3.0), 8.0)


def _label_inches(labels: list[str], points: float) -> float:
    """Room for the longest label, a character taken as 0.6 em."""
    return max((len(_label(t)) for t in labels), default=1) * points * 0.6 / 72 + 0.2


def mosaic(maps: list[np.ndarray], ncols: int, gap_x: int, gap_y: int) -> np.ndarray:
    """Equal-shaped maps tiled row by row into one array, NaN (drawn blank) between tiles."""
    rows, cols = maps[0].shape
    nrows = math.ceil(len(maps) / ncols)
    out = np.full((nrows * (rows + gap_y) - gap_y, ncols * (cols + gap_x) - gap_x), np.nan)
    for i, values in enumerate(maps):
        r, c = divmod(i, ncols)
        out[r * (rows + gap_y) : r * (rows + gap_y) + rows, c * (cols + gap_x) : c * (cols + gap_x) + cols] = values
    return out


def draw_attention(
    weights: torch.Tensor, columns: list[str], rows: list[str], title: str, with_mean: bool = False
) -> Figure:
    """weights: (heads, rows, columns). One heatmap per head (and first their mean if `with_mean`),
    tiled in a grid with a shared colour scale; columns on the x axis, rows on the y axis.

    All tiles are one image in one Axes, labelled with plain text: an Axes or a tick per tile costs
    matplotlib milliseconds each, and a validation draws kinds x layers x samples figures."""
    heads = weights.float().cpu().numpy()
    panels = ([("mean of heads", heads.mean(axis=0))] if with_mean else []) + [
        (f"head {h + 1}", heads[h]) for h in range(heads.shape[0])
    ]
    ncols = math.ceil(math.sqrt(len(panels)))
    cell_w, cell_h = _tile_inches(len(columns)) / len(columns), _tile_inches(len(rows)) / len(rows)
    gap_x, gap_y = math.ceil(0.15 / cell_w), math.ceil(0.3 / cell_h)  # in cells; a tile's title sits in the gap above
    image = mosaic([values for _, values in panels], ncols, gap_x, gap_y)
    fonts = (_font_size(cell_w), _font_size(cell_h))
    left, bottom, top, right = _label_inches(rows, fonts[1]), _label_inches(columns, fonts[0]), 0.7, 1.1
    width, height = image.shape[1] * cell_w, image.shape[0] * cell_h
    fig_w, fig_h = left + width + right, top + height + bottom
    fig = Figure(figsize=(fig_w, fig_h), dpi=DPI)
    ax = fig.add_axes((left / fig_w, bottom / fig_h, width / fig_w, height / fig_h))
    ax.set_axis_off()
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    vmax = max(float(heads.max()), 1e-6)
    heat = ax.imshow(image, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
    for i, (name, _) in enumerate(panels):
        origin = ((i % ncols) * (len(columns) + gap_x), (i // ncols) * (len(rows) + gap_y))
        # Token labels on the outer tiles only: below the lowest tile of each column, left of the first.
        below = columns if i + ncols >= len(panels) else []
        _label_tile(ax, origin, name, (len(columns), len(rows)), below, rows if i % ncols == 0 else [], fonts)
    colorbar_axes = fig.add_axes(((left + width + 0.25) / fig_w, bottom / fig_h, 0.15 / fig_w, height / fig_h))
    colorbar = fig.colorbar(heat, cax=colorbar_axes)
    colorbar.set_label("attention weight", fontsize=8)
    colorbar.ax.tick_params(labelsize=7)
    fig.suptitle(title.replace("$", r"\$"), fontsize=10, y=1 - 0.1 / fig_h, va="top")
    return fig


def _label_tile(
    ax: Axes,
    origin: tuple[int, int],
    name: str,
    shape: tuple[int, int],
    columns: list[str],
    rows: list[str],
    fonts: tuple[float, float],
) -> None:
    """Title above the tile whose top-left cell is `origin` (x, y); column labels under it, row labels left of it."""
    (x0, y0), (width, height) = origin, shape
    nudge = ax.figure.dpi_scale_trans

    def offset(dx: float, dy: float) -> Transform:  # a few points away from the tile edge
        return ax.transData + ScaledTranslation(dx / 72, dy / 72, nudge)

    ax.text(x0 + (width - 1) / 2, y0 - 0.5, name, ha="center", va="bottom", fontsize=8, transform=offset(0, 2))
    for j, label in enumerate(columns):
        ax.text(
            x0 + j,
            y0 + height - 0.5,
            _label(label),
            rotation=90,
            ha="center",
            va="top",
            fontsize=fonts[0],
            transform=offset(0, -3),
        )
    for j, label in enumerate(rows):
        ax.text(x0 - 0.5, y0 + j, _label(label), ha="right", va="center", fontsize=fonts[1], transform=offset(-3, 0))


def render(fig: Figure) -> np.ndarray:
    """The figure as an (H, W, 3) uint8 array (what TensorBoard's add_image takes)."""
    canvas = FigureCanvasAgg(fig)
    with _quiet_glyphs():
        canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def save_png(fig: Figure, path: Path) -> None:
    """A new file renamed over an earlier plot of the same name (a hard link to it keeps its picture)."""

    def draw(file: Path) -> None:
        with _quiet_glyphs():
            fig.savefig(file, format="png")

    try:
        write_new_file(path, draw)
    except OSError as err:
        raise UserError(f"{path}: cannot write the attention plot ({err.strerror or err})") from err


@contextmanager
def _quiet_glyphs() -> Iterator[None]:
    """Scripts the default font lacks (CJK, ...) draw as boxes; a warning per missing glyph is noise."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing")
        yield


# ---- what the two callers want -------------------------------------------------------------------


def attention_images(
    samples: list[SentenceAttention], kinds: tuple[str, ...] = KINDS
) -> Iterator[tuple[str, np.ndarray]]:
    """(tag, image) for every kind, layer and sample: attention/<kind>/layer_<l>/sample_<i>, heads tiled.
    Drawn one at a time as the caller asks for them, each kind's last layer first (the one whose output
    is used), then each kind's layer before it: a caller that stops after a few images (training's
    drawing budget) has one of every kind, where kind by kind it had only cross-attention."""
    for number, sample in enumerate(samples, start=1):
        depth = max(len(sample.weights.get(kind, [])) for kind in kinds)
        for back in range(depth):  # encoder and decoder may differ in depth: counted from each one's last
            for kind in kinds:
                layers = sample.weights.get(kind, [])
                if back >= len(layers):
                    continue
                layer = len(layers) - back
                columns, rows = sample.axes(kind)
                title = f"{kind} attention, layer {layer}, sample {number}"
                yield (
                    f"attention/{kind}/layer_{layer}/sample_{number}",
                    render(draw_attention(layers[layer - 1], columns, rows, title)),
                )


def make_directory(directory: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"attention={directory}: cannot create the directory ({err.strerror or err})") from err
    return directory


def png_name(sentence_id: int) -> str:
    return f"sentence_{sentence_id:06d}.png"


def write_cross_attention_pngs(
    translator: Translator, lines: list[str], outputs: list[list[int]], directory: Path, first_id: int = 0
) -> list[Path]:
    """One PNG per non-empty line, named by its sentence id: 0-based, the id the n-best lines carry
    (Moses/Marian convention), so sentence_000004.png belongs to "4 ||| ..." (input line 5). The
    last decoder layer's cross-attention averaged over heads (first panel), then each head. The last
    layer is the one whose output is projected to the vocabulary, the usual choice for alignments."""
    make_directory(directory)
    written = []
    for offset, (line, out_ids) in enumerate(zip(lines, outputs, strict=True)):
        if not line.strip():
            continue
        sample = sentence_attention(translator, line, out_ids)
        columns, rows = sample.axes("cross")
        sentence = first_id + offset
        title = f"sentence {sentence} (input line {sentence + 1}): cross-attention, last layer"
        path = directory / png_name(sentence)
        save_png(draw_attention(sample.weights["cross"][-1], columns, rows, title, with_mean=True), path)
        written.append(path)
    return written
