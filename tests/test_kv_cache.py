"""The key/value cache of incremental decoding (`seq2seq.model.kv_cache`), checked against tensors
concatenated and indexed by hand."""

from __future__ import annotations

import torch

from seq2seq.model.kv_cache import DecoderState, KVCache, LayerCache

HEADS, DIM = 2, 3


def random_kv(rows: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shape = (rows, HEADS, length, DIM)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


def labelled(rows: int, length: int = 2, offset: float = 0.0) -> torch.Tensor:
    """(rows, H, length, D) whose every entry of row r is offset + r: a row says where it came from."""
    return (torch.arange(rows, dtype=torch.float) + offset).view(-1, 1, 1, 1).expand(rows, HEADS, length, DIM).clone()


def row_labels(tensor: torch.Tensor | None) -> list[float]:
    assert tensor is not None
    return tensor[:, 0, 0, 0].tolist()


def test_append_puts_the_new_positions_after_the_cached_ones() -> None:
    cache = KVCache()
    assert cache.empty
    k1, v1 = random_kv(2, 3, seed=0)
    k2, v2 = random_kv(2, 1, seed=1)
    k, v = cache.append(k1, v1)
    assert torch.equal(k, k1) and torch.equal(v, v1) and not cache.empty
    k, v = cache.append(k2, v2)
    assert k.shape == v.shape == (2, HEADS, 4, DIM)
    for row in range(2):
        for head in range(HEADS):
            for position in range(4):
                want_k = k1[row, head, position] if position < 3 else k2[row, head, position - 3]
                want_v = v1[row, head, position] if position < 3 else v2[row, head, position - 3]
                assert torch.equal(k[row, head, position], want_k)
                assert torch.equal(v[row, head, position], want_v)
    assert cache.k is k and cache.v is v  # what the next step appends to


def test_select_rows_keeps_the_rows_asked_for_in_that_order() -> None:
    cache = KVCache()
    k, v = random_kv(4, 3, seed=2)
    cache.append(k, v)
    index = [2, 0, 2]  # reordered, one row dropped, one taken twice
    cache.select_rows(torch.tensor(index))
    assert torch.equal(cache.k, torch.stack([k[i] for i in index]))
    assert torch.equal(cache.v, torch.stack([v[i] for i in index]))
    empty = KVCache()
    empty.select_rows(torch.tensor([0]))  # before the first step: nothing to select
    assert empty.empty


def decoder_state(sentences: int, group: int, layers: int = 2) -> DecoderState:
    """Self-attention caches labelled by decoder row, cross-attention caches and memory by sentence."""
    caches = []
    for layer in range(layers):
        cache = LayerCache()
        cache.self_attn.append(labelled(sentences * group, offset=100 * layer), labelled(sentences * group))
        cache.cross_attn.append(labelled(sentences, offset=100 * layer), labelled(sentences))
        caches.append(cache)
    memory = torch.arange(sentences, dtype=torch.float).view(-1, 1, 1).expand(sentences, 5, 4).clone()
    src_mask = torch.ones(sentences, 1, 1, 5, dtype=torch.bool)
    return DecoderState(memory, src_mask, caches, offset=2, group=group)


def test_select_sentences_keeps_every_row_of_each_sentence() -> None:
    state = decoder_state(sentences=3, group=2)
    state.select_sentences(torch.tensor([2, 0]))
    assert state.memory[:, 0, 0].tolist() == [2, 0]
    assert state.src_mask.shape[0] == 2
    for layer, cache in enumerate(state.caches):
        # sentence 2 owns rows 4 and 5, sentence 0 rows 0 and 1
        assert row_labels(cache.self_attn.k) == [100 * layer + r for r in (4, 5, 0, 1)]
        assert row_labels(cache.self_attn.v) == [4, 5, 0, 1]
        assert row_labels(cache.cross_attn.k) == [100 * layer + s for s in (2, 0)]
        assert row_labels(cache.cross_attn.v) == [2, 0]
    assert state.offset == 2  # positions decoded so far are not touched


def test_reorder_beams_moves_only_the_decoded_prefixes() -> None:
    state = decoder_state(sentences=2, group=3)
    parents = [2, 2, 0, 4, 3, 3]  # each row continues a row of its own sentence
    state.reorder_beams(torch.tensor(parents))
    assert state.memory[:, 0, 0].tolist() == [0, 1]  # one memory row per sentence, as before
    for layer, cache in enumerate(state.caches):
        assert row_labels(cache.self_attn.k) == [100 * layer + p for p in parents]
        assert row_labels(cache.self_attn.v) == parents
        assert row_labels(cache.cross_attn.k) == [100 * layer + s for s in (0, 1)]


def test_reordering_to_more_rows_gives_each_sentence_its_beams_after_the_first_step() -> None:
    state = decoder_state(sentences=3, group=1)  # the first step of beam search: one row per sentence
    state.reorder_beams(torch.tensor([0, 0, 1, 1, 2, 2]), group=2)
    assert state.group == 2 and state.rows_of(torch.tensor([2])).tolist() == [4, 5]
    for layer, cache in enumerate(state.caches):
        assert row_labels(cache.self_attn.k) == [100 * layer + r for r in (0, 0, 1, 1, 2, 2)]
        assert row_labels(cache.cross_attn.k) == [100 * layer + s for s in (0, 1, 2)]  # still one per sentence
    state.select_sentences(torch.tensor([2]))  # then sentences leave with both of their rows
    assert row_labels(state.caches[0].self_attn.v) == [2, 2]


def test_the_first_keys_and_values_are_stored_contiguous() -> None:
    """A chunk of the K/V projection is a strided view; a matmul would copy it at every step that reads it."""
    projected = torch.randn(3, 4, 2 * 8)
    k, v = (t.view(3, 4, 2, 4).transpose(1, 2) for t in projected.chunk(2, dim=-1))
    assert not k.is_contiguous()
    cache = KVCache()
    cache.append(k, v)
    assert cache.k.is_contiguous() and cache.v.is_contiguous()
    assert torch.equal(cache.k, k) and torch.equal(cache.v, v)


def test_rows_of_lists_each_sentences_rows() -> None:
    state = decoder_state(sentences=3, group=4)
    assert state.rows_of(torch.tensor([1, 2])).tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    assert decoder_state(sentences=3, group=1).rows_of(torch.tensor([2, 0])).tolist() == [2, 0]
