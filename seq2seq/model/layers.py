"""The encoder and decoder layers (paper §3.1, Figure 1): sublayers wrapped in residual + LayerNorm."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq.config import ModelConfig
from seq2seq.model.attention import MultiHeadAttention
from seq2seq.model.dropout import Dropout
from seq2seq.model.kv_cache import LayerCache

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}

# Attention weights collected per kind ("encoder", "decoder_self", "cross"), one (B, H, T, S) per layer.
AttentionRecord = dict[str, list[torch.Tensor]]


class FeedForward(nn.Module):
    """FFN(x) = activation(x W1 + b1) W2 + b2, applied to each position alone (paper §3.3)."""

    def __init__(self, d_model: int, ffn_dim: int, activation: str, dropout: float) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, ffn_dim)
        self.linear2 = nn.Linear(ffn_dim, d_model)
        self.activation = ACTIVATIONS[activation]
        # The widest activation of the model: skip the dropout call entirely when it is off.
        self.dropout = Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # On rows, not (batch, length, d_model): compiled, the first linear's 3-d output is a view of
        # its matrix product, so the ReLU behind it stayed unwritten; the second linear wrote its own
        # copy of it, and the ReLU's backward recomputed it from the product, which then lived to the
        # backward beside the copy: two (tokens x ffn_dim) activations a layer instead of one.
        rows = x.reshape(-1, x.size(-1))
        return self.linear2(self.dropout(self.activation(self.linear1(rows)))).view(x.shape)


class Residual(nn.Module):
    """x + Dropout(sublayer(x)) with LayerNorm after (post-norm, the paper) or before (pre-norm,
    which trains deep stacks without a long warmup). skip=False leaves the `x +` out: the sublayer's
    output alone goes on (model.encoder_drop_residual_layer)."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool, skip: bool = True) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first
        self.skip = skip

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.norm_first:
            out = self.dropout(sublayer(self.norm(x)))
            return x + out if self.skip else out
        out = self.dropout(sublayer(x))
        return self.norm(x + out if self.skip else out)


def _record(record: AttentionRecord | None, kind: str, weights: torch.Tensor | None) -> None:
    if record is not None and weights is not None:
        record.setdefault(kind, []).append(weights.detach())


class EncoderLayer(nn.Module):
    """Self-attention over the source, then the feed-forward network. attn_skip=False: the
    self-attention's output without the residual connection around it, which frees the layer's output
    from the source's positions (Liu et al. 2021; model.encoder_drop_residual_layer)."""

    def __init__(self, cfg: ModelConfig, attn_skip: bool = True) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, cross=False)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation, cfg.activation_dropout)
        self.attn_residual = Residual(cfg.d_model, cfg.dropout, cfg.norm_first, skip=attn_skip)
        self.ffn_residual = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor, record: AttentionRecord | None = None) -> torch.Tensor:
        def self_attention(h: torch.Tensor) -> torch.Tensor:
            out, weights = self.self_attn(h, mask=src_mask, need_weights=record is not None)
            _record(record, "encoder", weights)
            return out

        x = self.attn_residual(x, self_attention)
        return self.ffn_residual(x, self.ffn)


class DecoderLayer(nn.Module):
    """Masked self-attention over the target prefix, cross-attention to the encoder memory, then the FFN."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, cross=False)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, cross=True)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation, cfg.activation_dropout)
        self.self_residual = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.cross_residual = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)
        self.ffn_residual = Residual(cfg.d_model, cfg.dropout, cfg.norm_first)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: LayerCache | None = None,
        record: AttentionRecord | None = None,
    ) -> torch.Tensor:
        need_weights = record is not None

        def masked_self_attention(h: torch.Tensor) -> torch.Tensor:
            self_cache = cache.self_attn if cache is not None else None
            out, weights = self.self_attn(h, causal=True, cache=self_cache, need_weights=need_weights)
            _record(record, "decoder_self", weights)
            return out

        def cross_attention(h: torch.Tensor) -> torch.Tensor:
            cross_cache = cache.cross_attn if cache is not None else None
            out, weights = self.cross_attn(h, memory, mask=src_mask, cache=cross_cache, need_weights=need_weights)
            _record(record, "cross", weights)
            return out

        x = self.self_residual(x, masked_self_attention)
        x = self.cross_residual(x, cross_attention)
        return self.ffn_residual(x, self.ffn)
