"""The encoder-decoder Transformer of "Attention Is All You Need", built from its parts.

src -> embed*sqrt(d) + positions -> N x EncoderLayer -> memory
tgt -> embed*sqrt(d) + positions -> N x DecoderLayer(memory) -> Linear -> logits
"""

from __future__ import annotations

import torch
from torch import nn

from seq2seq.config import ModelConfig
from seq2seq.model.dropout import Dropout
from seq2seq.model.embedding import PositionalEncoding, TokenEmbedding
from seq2seq.model.kv_cache import DecoderState, LayerCache
from seq2seq.model.layers import AttentionRecord, DecoderLayer, EncoderLayer


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, S) token ids -> (B, 1, 1, S) bool, True where a key may be attended to.
    Built once per batch and shared by every layer and head."""
    return (tokens != pad_id)[:, None, None, :]


class Transformer(nn.Module):
    """`encode` (src -> memory), `decode` (tgt, memory -> hidden states), `forward` (src, tgt -> logits),
    and for search `start_decoding` + `decode_step` (one token at a time over a key/value cache)."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.pad_id = pad_id
        # Marian's decoder starts from a zero vector, not a learned row, and has no pad among its
        # outputs; CTranslate2's Marian converter and Argos packages build the model that way.
        self.marian_start = cfg.decoder_start == "pad"
        self.src_embed = TokenEmbedding(src_vocab_size, cfg.d_model, pad_id, cfg.scale_embedding)
        if cfg.share_embeddings:
            if src_vocab_size != tgt_vocab_size:
                raise ValueError("model.share_embeddings needs a joint vocabulary (data.joint_vocab=true)")
            self.tgt_embed = self.src_embed
        else:
            self.tgt_embed = TokenEmbedding(tgt_vocab_size, cfg.d_model, pad_id, cfg.scale_embedding)
        learned = cfg.positions == "learned"
        self.src_positions = PositionalEncoding(cfg.max_positions, cfg.d_model, learned, cfg.sinusoid_layout)
        self.tgt_positions = PositionalEncoding(cfg.max_positions, cfg.d_model, learned, cfg.sinusoid_layout)
        self.dropout = Dropout(cfg.dropout)
        # mBART's layernorm_embedding: the embeddings and positions normalised before the first layer.
        self.src_embed_norm = nn.LayerNorm(cfg.d_model) if cfg.embedding_norm else nn.Identity()
        self.tgt_embed_norm = nn.LayerNorm(cfg.d_model) if cfg.embedding_norm else nn.Identity()
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(cfg, attn_skip=i != cfg.encoder_drop_residual_layer) for i in range(cfg.encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # Pre-norm leaves the residual stream un-normalised: one last LayerNorm on each stack.
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.output = nn.Linear(cfg.d_model, tgt_vocab_size, bias=False)
        # Marian's final_logits_bias: a buffer, as in transformers, so fine-tuning leaves it as it came.
        self.register_buffer("output_bias", torch.zeros(tgt_vocab_size) if cfg.output_bias else None)
        self._init_weights()
        if cfg.tie_output:  # paper §3.4: the pre-softmax projection shares the target embedding
            self.output.weight = self.tgt_embed.weight

    def _init_weights(self) -> None:
        for name, param in self.named_parameters():
            if param.dim() > 1 and "embed" not in name and "positions" not in name:
                nn.init.xavier_uniform_(param)
            elif name.endswith(".bias"):
                nn.init.zeros_(param)

    def encode(self, src: torch.Tensor, record: AttentionRecord | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """src: (B, S) ids -> memory (B, S, d_model) and its mask (B, 1, 1, S)."""
        src_mask = padding_mask(src, self.pad_id)
        x = self.dropout(self.src_embed_norm(self.src_positions(self.src_embed(src))))
        for layer in self.encoder_layers:
            x = layer(x, src_mask, record)
        return self.encoder_norm(x), src_mask

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        state: DecoderState | None = None,
        record: AttentionRecord | None = None,
    ) -> torch.Tensor:
        """tgt: (B, T) ids -> hidden states (B, T, d_model). Target padding needs no mask: it only
        follows real tokens, which the causal mask already keeps from seeing it. With a `state`,
        `tgt` holds only the new positions and the state's caches supply the prefix."""
        offset = state.offset if state is not None else 0
        embedded = self.tgt_embed(tgt)
        if self.marian_start:  # the start (and trailing padding, which nothing attends to) is a zero vector
            embedded = embedded.masked_fill((tgt == self.pad_id)[..., None], 0.0)
        x = self.dropout(self.tgt_embed_norm(self.tgt_positions(embedded, offset)))
        for i, layer in enumerate(self.decoder_layers):
            cache = state.caches[i] if state is not None else None
            x = layer(x, memory, src_mask, cache, record)
        if state is not None:
            state.offset += tgt.size(1)
        return self.decoder_norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., d_model) hidden states -> (..., V) scores of the next token."""
        logits = self.output(hidden)
        return logits if self.output_bias is None else logits + self.output_bias.to(logits.dtype)

    def start_decoding(self, src: torch.Tensor, group: int = 1) -> DecoderState:
        """Encode the source once; the returned state feeds `decode_step` with `group` rows
        (hypotheses) per sentence."""
        memory, src_mask = self.encode(src)
        caches = [LayerCache() for _ in self.decoder_layers]
        return DecoderState(memory, src_mask, caches, group=group)

    def decode_step(self, tokens: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """One incremental step: tokens (B * group,) just emitted -> log-probabilities (B * group, V)
        of the next."""
        hidden = self.decode(tokens[:, None], state.memory, state.src_mask, state)
        logits = self.logits(hidden[:, -1]).float()
        if self.marian_start:  # pad is no output: left out of the softmax, as Marian's vocabulary leaves it
            logits[:, self.pad_id] = float("-inf")
        return torch.log_softmax(logits, dim=-1)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: (B, S), (B, T) ids -> logits (B, T, V) of every next token. Training does
        not call this: its loss takes `decode`'s hidden states and projects only the non-pad positions
        to the vocabulary (`seq2seq.train.loss`), which saves the largest matmul on padding."""
        memory, src_mask = self.encode(src)
        return self.logits(self.decode(tgt_in, memory, src_mask))


def build_model(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, pad_id: int) -> Transformer:
    return Transformer(cfg, src_vocab_size, tgt_vocab_size, pad_id)
