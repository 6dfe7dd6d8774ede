"""Correctness checks of the Transformer in `seq2seq.model`, each against an independent computation:
PyTorch's own `nn.MultiheadAttention` / `nn.Transformer*Layer` with the same weights, the paper's
formulas evaluated with Python `math`, or the model's own full-sequence forward pass."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from seq2seq.config import ModelConfig
from seq2seq.model.attention import MultiHeadAttention
from seq2seq.model.embedding import LookupGradientMadeLate, PositionalEncoding, TokenEmbedding, sinusoidal_table
from seq2seq.model.kv_cache import DecoderState, KVCache
from seq2seq.model.layers import AttentionRecord, DecoderLayer, EncoderLayer
from seq2seq.model.transformer import Transformer, padding_mask

D_MODEL, HEADS, FFN, LAYERS = 32, 4, 64, 2
PAD = 0
SRC_VOCAB, TGT_VOCAB = 23, 19
ATOL = 1e-5


def small_config(**overrides: object) -> ModelConfig:
    """A tiny model config: d_model 32, 4 heads, 2 layers each side, no dropout."""
    kwargs: dict[str, object] = {
        "d_model": D_MODEL,
        "heads": HEADS,
        "ffn_dim": FFN,
        "encoder_layers": LAYERS,
        "decoder_layers": LAYERS,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "max_positions": 64,
    }
    kwargs.update(overrides)
    return ModelConfig(**kwargs)  # type: ignore[arg-type]


def make_model(seed: int = 0, **overrides: object) -> Transformer:
    """A small Transformer in eval mode, with biases and LayerNorms randomised so that a wrong
    parameter mapping or a skipped term would show."""
    torch.manual_seed(seed)
    model = Transformer(small_config(**overrides), SRC_VOCAB, TGT_VOCAB, PAD)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                param.add_(0.1 * torch.randn_like(param))
    return model.eval()


def random_tokens(batch: int, length: int, vocab: int, lengths: list[int] | None = None) -> torch.Tensor:
    """(batch, length) ids in [1, vocab), right-padded with PAD beyond `lengths`."""
    tokens = torch.randint(1, vocab, (batch, length))
    if lengths is not None:
        for row, n in enumerate(lengths):
            tokens[row, n:] = PAD
    return tokens


def randomize(module: nn.Module) -> None:
    """Give every parameter random values (non-trivial LayerNorm affine and biases included)."""
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(0.3 * torch.randn_like(param))


def our_mask(key_padding: torch.Tensor) -> torch.Tensor:
    """torch key_padding_mask (B, S), True = ignore -> our mask (B, 1, 1, S), True = may attend."""
    return (~key_padding)[:, None, None, :]


def causal_ignore_mask(length: int) -> torch.Tensor:
    """torch attn_mask convention: True above the diagonal = may not attend."""
    return torch.ones(length, length, dtype=torch.bool).triu(1)


def copy_self_attention(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv_proj.weight)
        ref.in_proj_bias.copy_(ours.qkv_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)


def copy_cross_attention(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.kv_proj.weight], dim=0))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.kv_proj.bias], dim=0))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)


def copy_linear(src: nn.Linear, dst: nn.Linear) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)


def copy_norm(src: nn.LayerNorm, dst: nn.LayerNorm) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)


# 1. Multi-head attention against torch.nn.MultiheadAttention ------------------------------------


def _attention_pair(cross: bool) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    torch.manual_seed(0)
    ours = MultiHeadAttention(D_MODEL, HEADS, dropout=0.0, cross=cross).eval()
    randomize(ours)
    ref = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).eval()
    if cross:
        copy_cross_attention(ours, ref)
    else:
        copy_self_attention(ours, ref)
    return ours, ref


def test_self_attention_matches_torch_with_padding_mask() -> None:
    ours, ref = _attention_pair(cross=False)
    x = torch.randn(3, 7, D_MODEL)
    ignore = torch.zeros(3, 7, dtype=torch.bool)
    ignore[1, 5:] = True
    ignore[2, 2:] = True
    expected, expected_w = ref(x, x, x, key_padding_mask=ignore, need_weights=True)
    out, weights = ours(x, mask=our_mask(ignore))
    assert weights is None
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)

    out_w, weights = ours(x, mask=our_mask(ignore), need_weights=True)
    torch.testing.assert_close(out_w, out, atol=ATOL, rtol=0)
    assert weights is not None and weights.shape == (3, HEADS, 7, 7)
    torch.testing.assert_close(weights.mean(dim=1), expected_w, atol=ATOL, rtol=0)
    _, per_head = ref(x, x, x, key_padding_mask=ignore, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(weights, per_head, atol=ATOL, rtol=0)


def test_self_attention_matches_torch_with_causal_mask() -> None:
    ours, ref = _attention_pair(cross=False)
    x = torch.randn(2, 6, D_MODEL)
    ignore = torch.zeros(2, 6, dtype=torch.bool)
    ignore[0, 4:] = True  # causal and padding together; every row keeps key 0
    expected, _ = ref(x, x, x, key_padding_mask=ignore, attn_mask=causal_ignore_mask(6))
    _, per_head = ref(
        x, x, x, key_padding_mask=ignore, attn_mask=causal_ignore_mask(6), need_weights=True, average_attn_weights=False
    )
    out, _ = ours(x, mask=our_mask(ignore), causal=True)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    out_w, weights = ours(x, mask=our_mask(ignore), causal=True, need_weights=True)
    torch.testing.assert_close(out_w, expected, atol=ATOL, rtol=0)
    assert weights is not None
    torch.testing.assert_close(weights, per_head, atol=ATOL, rtol=0)
    # causal alone
    expected, _ = ref(x, x, x, attn_mask=causal_ignore_mask(6))
    out, _ = ours(x, causal=True)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)


def test_cross_attention_matches_torch() -> None:
    ours, ref = _attention_pair(cross=True)
    x = torch.randn(3, 5, D_MODEL)
    memory = torch.randn(3, 8, D_MODEL)
    ignore = torch.zeros(3, 8, dtype=torch.bool)
    ignore[0, 6:] = True
    ignore[2, 3:] = True
    expected, expected_w = ref(x, memory, memory, key_padding_mask=ignore, need_weights=True)
    _, per_head = ref(x, memory, memory, key_padding_mask=ignore, need_weights=True, average_attn_weights=False)
    out, _ = ours(x, memory, mask=our_mask(ignore))
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    out_w, weights = ours(x, memory, mask=our_mask(ignore), need_weights=True)
    torch.testing.assert_close(out_w, out, atol=ATOL, rtol=0)
    assert weights is not None and weights.shape == (3, HEADS, 5, 8)
    torch.testing.assert_close(weights.mean(dim=1), expected_w, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, per_head, atol=ATOL, rtol=0)


def test_grouped_decoding_cross_attention_matches_torch() -> None:
    """Decoding: under no_grad a few queries take the matmul path (not SDPA), and in beam search
    g query rows share one memory row. Against torch on the memory repeated for every query row."""
    ours, ref = _attention_pair(cross=True)
    group = 3
    x = torch.randn(2 * group, 1, D_MODEL)  # one new position for 3 hypotheses of each of 2 sentences
    memory = torch.randn(2, 8, D_MODEL)
    ignore = torch.zeros(2, 8, dtype=torch.bool)
    ignore[1, 5:] = True
    repeated = memory.repeat_interleave(group, dim=0)
    expected, per_head = ref(
        x, repeated, repeated, key_padding_mask=ignore.repeat_interleave(group, dim=0), average_attn_weights=False
    )
    cache = KVCache()
    with torch.no_grad():
        out, _ = ours(x, memory, mask=our_mask(ignore), cache=cache)
        assert cache.k.shape == (2, HEADS, 8, D_MODEL // HEADS)  # kept once per sentence
        again, weights = ours(x, memory, mask=our_mask(ignore), cache=cache, need_weights=True)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(again, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, per_head, atol=ATOL, rtol=0)


# 2. Encoder and decoder layers against torch.nn.Transformer{Encoder,Decoder}Layer ------------------


def copy_encoder_layer(ours: EncoderLayer, ref: nn.TransformerEncoderLayer) -> None:
    """Our encoder layer's weights into torch's, module by module."""
    copy_self_attention(ours.self_attn, ref.self_attn)
    copy_linear(ours.ffn.linear1, ref.linear1)
    copy_linear(ours.ffn.linear2, ref.linear2)
    copy_norm(ours.attn_residual.norm, ref.norm1)
    copy_norm(ours.ffn_residual.norm, ref.norm2)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(norm_first: bool) -> None:
    torch.manual_seed(1)
    ours = EncoderLayer(small_config(norm_first=norm_first)).eval()
    randomize(ours)
    ref = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_encoder_layer(ours, ref)

    x = torch.randn(3, 7, D_MODEL)
    ignore = torch.zeros(3, 7, dtype=torch.bool)
    ignore[1, 4:] = True
    ignore[2, 6:] = True
    expected = ref(x, src_key_padding_mask=ignore)
    torch.testing.assert_close(ours(x, our_mask(ignore)), expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first: bool) -> None:
    torch.manual_seed(2)
    ours = DecoderLayer(small_config(norm_first=norm_first)).eval()
    randomize(ours)
    ref = nn.TransformerDecoderLayer(D_MODEL, HEADS, FFN, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_self_attention(ours.self_attn, ref.self_attn)
    copy_cross_attention(ours.cross_attn, ref.multihead_attn)
    copy_linear(ours.ffn.linear1, ref.linear1)
    copy_linear(ours.ffn.linear2, ref.linear2)
    copy_norm(ours.self_residual.norm, ref.norm1)
    copy_norm(ours.cross_residual.norm, ref.norm2)
    copy_norm(ours.ffn_residual.norm, ref.norm3)

    x = torch.randn(3, 6, D_MODEL)
    memory = torch.randn(3, 9, D_MODEL)
    ignore = torch.zeros(3, 9, dtype=torch.bool)
    ignore[0, 5:] = True
    ignore[2, 2:] = True
    expected = ref(x, memory, tgt_mask=causal_ignore_mask(6), memory_key_padding_mask=ignore)
    torch.testing.assert_close(ours(x, memory, our_mask(ignore)), expected, atol=ATOL, rtol=0)


# 3-4. Embeddings ---------------------------------------------------------------------------------


def test_sinusoidal_table_matches_paper_formula() -> None:
    d_model = 32
    table = sinusoidal_table(100, d_model)
    assert table.shape == (100, d_model)
    for pos in (0, 1, 5, 37, 99):
        for i in (0, 1, 3, 8, 15):
            angle = pos / 10000 ** (2 * i / d_model)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)
    # The module adds the table at the right offset.
    enc = PositionalEncoding(100, d_model, learned=False)
    x = torch.zeros(1, 3, d_model)
    torch.testing.assert_close(enc(x, offset=5)[0], table[5:8])
    with pytest.raises(ValueError):
        enc(torch.zeros(1, 3, d_model), offset=98)


def test_token_embedding_scaled_by_sqrt_d_model() -> None:
    torch.manual_seed(0)
    emb = TokenEmbedding(11, D_MODEL, pad_id=PAD)
    tokens = torch.tensor([[3, 0, 7, 10]])
    out = emb(tokens)
    torch.testing.assert_close(out[0], emb.weight.detach()[tokens[0]] * math.sqrt(D_MODEL))
    assert torch.all(out[0, 1] == 0)  # pad row starts at zero


def test_traced_lookups_gradient_is_the_embeddings() -> None:
    """The look-up compile=true traces (LookupGradientMadeLate) gives the rows and the table's gradient
    that autograd gives for F.embedding with padding_idx: each token's row gradients summed, a token
    seen twice twice, the pad row's none."""
    torch.manual_seed(0)
    weight = torch.randn(11, D_MODEL, requires_grad=True)
    tokens = torch.tensor([[3, PAD, 7, 3], [10, 3, PAD, 1]])
    upstream = torch.randn(2, 4, D_MODEL)
    rows = LookupGradientMadeLate.apply(tokens, weight, PAD)
    torch.testing.assert_close(rows, weight.detach()[tokens])
    (mine,) = torch.autograd.grad((rows * upstream).sum(), weight)
    expected = torch.zeros(11, D_MODEL)
    for token, row in zip(tokens.flatten().tolist(), upstream.reshape(-1, D_MODEL), strict=True):
        if token != PAD:
            expected[token] += row
    torch.testing.assert_close(mine, expected)
    (reference,) = torch.autograd.grad((nn.functional.embedding(tokens, weight, PAD) * upstream).sum(), weight)
    torch.testing.assert_close(mine, reference)


# 5-6. Causality and padding ----------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_is_causal(norm_first: bool) -> None:
    model = make_model(norm_first=norm_first)
    src = random_tokens(2, 7, SRC_VOCAB, lengths=[7, 5])
    tgt = random_tokens(2, 6, TGT_VOCAB)
    with torch.no_grad():
        base = model(src, tgt)
        for t in range(tgt.size(1) - 1):
            for k in (1, tgt.size(1) - 1 - t):
                changed = tgt.clone()
                changed[:, t + k] = (changed[:, t + k] % (TGT_VOCAB - 1)) + 1  # another non-pad token
                assert not torch.equal(changed, tgt)
                out = model(src, changed)
                torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], atol=ATOL, rtol=0)
                assert not torch.allclose(out[:, t + k], base[:, t + k], atol=1e-3)  # the change is seen


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_invariance(norm_first: bool) -> None:
    model = make_model(norm_first=norm_first)
    src = random_tokens(2, 6, SRC_VOCAB, lengths=[6, 4])
    tgt = random_tokens(2, 5, TGT_VOCAB)
    with torch.no_grad():
        base = model(src, tgt)
        src_padded = torch.cat([src, torch.full((2, 4), PAD)], dim=1)
        torch.testing.assert_close(model(src_padded, tgt), base, atol=ATOL, rtol=0)
        tgt_padded = torch.cat([tgt, torch.full((2, 3), PAD)], dim=1)
        torch.testing.assert_close(model(src, tgt_padded)[:, :5], base, atol=ATOL, rtol=0)
        # A source token that is not pad does change the output (the mask is not hiding everything).
        src_other = torch.cat([src, torch.full((2, 4), 3)], dim=1)
        assert not torch.allclose(model(src_other, tgt), base, atol=1e-3)


# 7. Incremental decoding -------------------------------------------------------------------------


def full_log_probs(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(model(src, tgt_in), dim=-1)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_incremental_decoding_matches_full(norm_first: bool, positions: str) -> None:
    model = make_model(norm_first=norm_first, positions=positions)
    src = random_tokens(3, 7, SRC_VOCAB, lengths=[7, 3, 5])
    tgt = random_tokens(3, 6, TGT_VOCAB)
    with torch.no_grad():
        expected = full_log_probs(model, src, tgt)
        state = model.start_decoding(src)
        for t in range(tgt.size(1)):
            step = model.decode_step(tgt[:, t], state)
            torch.testing.assert_close(step, expected[:, t], atol=ATOL, rtol=0)
        assert state.offset == tgt.size(1)

        # Several positions at once after a cached prefix (bottom-right causal alignment).
        state = model.start_decoding(src)
        hidden = model.decode(tgt[:, :2], state.memory, state.src_mask, state)
        hidden = torch.cat([hidden, model.decode(tgt[:, 2:], state.memory, state.src_mask, state)], dim=1)
        torch.testing.assert_close(torch.log_softmax(model.output(hidden), dim=-1), expected, atol=ATOL, rtol=0)


def test_bf16_incremental_decoding_stays_close_to_fp32() -> None:
    """A bf16 model decoding on a CPU (translate precision=bf16) keeps its caches and attention in
    fp32: each step's log-probabilities are within bf16 rounding of the fp32 model's full pass, with
    three sentences sharing each source (grouped cross-attention, as in beam search)."""
    model = make_model()
    src = random_tokens(2, 7, SRC_VOCAB, lengths=[7, 4])
    tgt = random_tokens(6, 5, TGT_VOCAB)
    with torch.no_grad():
        expected = full_log_probs(model, src.repeat_interleave(3, dim=0), tgt)
        half = copy.deepcopy(model).to(torch.bfloat16)
        state = half.start_decoding(src, group=3)
        for t in range(tgt.size(1)):
            step = half.decode_step(tgt[:, t], state)
            assert step.dtype == torch.float32 and state.caches[0].self_attn.k.dtype == torch.float32
            torch.testing.assert_close(step, expected[:, t], atol=0.1, rtol=0)
        assert state.caches[0].cross_attn.k.size(0) == 2  # once per source, not per row


@pytest.mark.parametrize("index", [[2, 0, 1], [1, 1, 0]])
def test_decoder_state_reorder(index: list[int]) -> None:
    model = make_model()
    src = random_tokens(3, 6, SRC_VOCAB, lengths=[6, 2, 4])
    tgt = random_tokens(3, 5, TGT_VOCAB)
    perm = torch.tensor(index)
    with torch.no_grad():
        state = model.start_decoding(src)
        for t in range(2):
            model.decode_step(tgt[:, t], state)
        state.select_sentences(perm)
        ref_state = model.start_decoding(src[perm])
        for t in range(2):
            model.decode_step(tgt[perm, t], ref_state)
        for t in range(2, tgt.size(1)):
            got = model.decode_step(tgt[perm, t], state)
            expected = model.decode_step(tgt[perm, t], ref_state)
            torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
        # And against the full forward pass on the permuted batch.
        full = full_log_probs(model, src[perm], tgt[perm])
        torch.testing.assert_close(got, full[:, -1], atol=ATOL, rtol=0)


def test_reorder_beams_follows_parents_within_each_sentence() -> None:
    """Beam search's cheap reorder (self-attention caches only) continues exactly like decoding the
    chosen prefixes from scratch: 2 sentences x 3 beams, parents drawn within each sentence."""
    model = make_model()
    beam = 3
    src = random_tokens(2, 6, SRC_VOCAB, lengths=[6, 3]).repeat_interleave(beam, dim=0)
    tgt = random_tokens(6, 5, TGT_VOCAB)
    parents = torch.tensor([2, 2, 0, 4, 3, 3])  # rows 0-2 are sentence 0, rows 3-5 sentence 1
    with torch.no_grad():
        state = model.start_decoding(src)
        for t in range(2):
            model.decode_step(tgt[:, t], state)
        state.reorder_beams(parents)
        prefix = tgt[parents, :2]
        got = model.decode_step(tgt[:, 2], state)
        expected = full_log_probs(model, src, torch.cat([prefix, tgt[:, 2:3]], dim=1))[:, -1]
        torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


# 8. Weight sharing -------------------------------------------------------------------------------


def test_tied_output_and_shared_embeddings() -> None:
    model = make_model(tie_output=True)
    assert model.output.weight is model.tgt_embed.weight
    assert model.src_embed is not model.tgt_embed
    untied = make_model(tie_output=False)
    assert untied.output.weight is not untied.tgt_embed.weight

    torch.manual_seed(0)
    shared = Transformer(small_config(share_embeddings=True, tie_output=True), 20, 20, PAD)
    assert shared.src_embed.weight is shared.tgt_embed.weight
    assert shared.output.weight is shared.src_embed.weight
    n_shared = sum(p.numel() for p in shared.parameters())
    n_separate = sum(p.numel() for p in Transformer(small_config(), 20, 20, PAD).parameters())
    assert n_separate - n_shared == 20 * D_MODEL  # parameters() counts the shared table once
    with pytest.raises(ValueError):
        Transformer(small_config(share_embeddings=True), 20, 21, PAD)


# 9. Attention records ----------------------------------------------------------------------------


def test_attention_record() -> None:
    model = make_model()
    batch, s_len, t_len = 2, 6, 5
    src = random_tokens(batch, s_len, SRC_VOCAB, lengths=[6, 3])
    tgt = random_tokens(batch, t_len, TGT_VOCAB)
    record: AttentionRecord = {}
    with torch.no_grad():
        memory, src_mask = model.encode(src, record)
        hidden = model.decode(tgt, memory, src_mask, record=record)
        # Recording changes nothing: the logits are those of the plain forward pass.
        torch.testing.assert_close(model.output(hidden), model(src, tgt), atol=ATOL, rtol=0)

    assert set(record) == {"encoder", "decoder_self", "cross"}
    shapes = {
        "encoder": (batch, HEADS, s_len, s_len),
        "decoder_self": (batch, HEADS, t_len, t_len),
        "cross": (batch, HEADS, t_len, s_len),
    }
    for kind, shape in shapes.items():
        assert len(record[kind]) == LAYERS
        for weights in record[kind]:
            assert weights.shape == shape
            assert not weights.requires_grad
            torch.testing.assert_close(weights.sum(-1), torch.ones(shape[:-1]), atol=ATOL, rtol=0)
    pad = ~padding_mask(src, PAD)[:, 0, 0, :]  # (B, S), True at padded source positions
    for weights in record["cross"] + record["encoder"]:
        assert torch.all(weights.permute(0, 3, 1, 2)[pad] == 0)
        assert torch.all(weights.permute(0, 3, 1, 2)[~pad].sum(-1).sum(-1) > 0)
    future = torch.ones(t_len, t_len, dtype=torch.bool).triu(1)
    for weights in record["decoder_self"]:
        assert torch.all(weights[..., future] == 0)


def test_padding_mask_and_state_types() -> None:
    tokens = torch.tensor([[5, 6, PAD], [7, PAD, PAD]])
    mask = padding_mask(tokens, PAD)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 1, 3)
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]
    model = make_model()
    state = model.start_decoding(random_tokens(2, 4, SRC_VOCAB))
    assert isinstance(state, DecoderState) and state.offset == 0 and len(state.caches) == LAYERS


def test_a_marian_start_is_a_zero_vector_and_pad_is_no_output() -> None:
    """model.decoder_start=pad (Marian's): the first decoder input is a zero vector whatever pad's
    embedding row holds, and pad has no probability, the rest summing to 1 without it (Marian's
    vocabulary has no pad; CTranslate2's converter removes it)."""
    model = make_model(decoder_start="pad").eval()
    src = random_tokens(2, 5, 11, lengths=[5, 3])
    start = torch.zeros(2, dtype=torch.long)  # pad
    with torch.no_grad():
        first = model.decode_step(start, model.start_decoding(src))
        model.tgt_embed.weight[0] += 1.0  # the row the lookup would read
        again = model.decode_step(start, model.start_decoding(src))
        memory, src_mask = model.encode(src)
        hidden = model.decode(start[:, None], memory, src_mask)
        without_pad = torch.log_softmax(model.logits(hidden[:, -1])[:, 1:], dim=-1)  # independent of decode_step
    assert torch.equal(first, again)
    assert torch.all(first[:, 0] == float("-inf"))
    torch.testing.assert_close(first[:, 1:], without_pad)


@pytest.mark.parametrize("norm_first", [False, True])
def test_a_dropped_residual_leaves_the_self_attentions_output_alone(norm_first: bool) -> None:
    """model.encoder_drop_residual_layer (Liu et al. 2021): in that layer the self-attention sublayer's
    output goes on without `x +`: torch's layer with the same weights, its `_sa_block` computed by hand
    without the residual, gives it; the layer's output no longer equals the one with the residual."""
    torch.manual_seed(3)
    cfg = small_config(norm_first=norm_first)
    ours, kept = EncoderLayer(cfg, attn_skip=False).eval(), EncoderLayer(cfg).eval()
    randomize(ours)
    kept.load_state_dict(ours.state_dict())
    ref = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_encoder_layer(ours, ref)

    x = torch.randn(3, 7, D_MODEL)
    ignore = torch.zeros(3, 7, dtype=torch.bool)
    ignore[1, 4:] = True
    with torch.no_grad():
        if norm_first:
            h = ref.self_attn(*[ref.norm1(x)] * 3, key_padding_mask=ignore, need_weights=False)[0]
            expected = h + ref._ff_block(ref.norm2(h))
        else:
            h = ref.norm1(ref.self_attn(x, x, x, key_padding_mask=ignore, need_weights=False)[0])
            expected = ref.norm2(h + ref._ff_block(h))
        got = ours(x, our_mask(ignore))
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    assert (got - kept(x, our_mask(ignore))).abs().max() > 0.1  # the residual made a difference


def test_the_model_drops_the_residual_in_the_layer_named_only() -> None:
    model = make_model(encoder_layers=3, encoder_drop_residual_layer=1)
    assert [layer.attn_residual.skip for layer in model.encoder_layers] == [True, False, True]
    assert all(layer.ffn_residual.skip for layer in model.encoder_layers)
    assert all(r.skip for layer in model.decoder_layers for r in (layer.self_residual, layer.cross_residual))
    assert all(layer.attn_residual.skip for layer in make_model(encoder_layers=3).encoder_layers)
