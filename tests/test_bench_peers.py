"""scripts/bench_peers.py: the corpus it hands the peers is seq2seq's own tokens, and it reads the
peers' progress lines as they print them (rates computed here by hand)."""

from __future__ import annotations

import json
import random

from conftest import compose_config
from script_module import load_script

from seq2seq.data.pipeline import prepare_data

bench_peers = load_script("bench_peers")

# Marian's progress lines as marian-dev prints them: cumulative target labels ("after"), seconds since
# the line before ("Time").
MARIAN_LOG = """\
[2026-12-06 21:30:01] Ep. 1 : Up. 10 : Sen. 2,400 : Cost 9.01 * 30,000 @ 3,000 after 30,000 : Time 12.00s : 2500.00 words/s : gNorm 2.1
[2026-12-06 21:30:11] Ep. 1 : Up. 20 : Sen. 4,800 : Cost 8.90 * 31,000 @ 3,100 after 61,000 : Time 10.00s : 3100.00 words/s : gNorm 2.0
[2026-12-06 21:30:20] Ep. 1 : Up. 30 : Sen. 7,200 : Cost 8.70 * 29,000 @ 2,900 after 90,000 : Time 9.50s : 3052.63 words/s : gNorm 1.9
"""

# Eole's, as Eole 0.6.4 printed them here: per-batch tokens (bsz), each interval's tok/s, cumulative seconds.
EOLE_LOG = """\
[2026-12-06 21:05:20,521 INFO] Step  2/   10; acc: 0.0; ppl: 7902.47; xent: 8.97; lr: 9.88e-07; sents:     597; bsz: 3668/3646/298; 263/261 tok/s;     28 sec;
[2026-12-06 21:05:28,182 INFO] Step  4/   10; acc: 0.0; ppl: 8086.41; xent: 9.00; lr: 1.98e-06; sents:     430; bsz: 3548/3870/215; 926/1010 tok/s;     36 sec;
[2026-12-06 21:05:36,138 INFO] Step  6/   10; acc: 0.0; ppl: 7899.10; xent: 8.97; lr: 2.96e-06; sents:     599; bsz: 3676/3730/300; 924/938 tok/s;     44 sec;
"""


def test_marian_rate_is_the_labels_after_warmup_over_their_seconds():
    intervals = bench_peers.marian_intervals(MARIAN_LOG)
    assert intervals == [(20, 31_000, 10.0), (30, 29_000, 9.5)]  # the labels between lines, and their seconds
    row = bench_peers._peer_row("marian", 40.0, intervals, warmup=10)
    # updates 11-30: 90,000 - 30,000 labels in 10.0 + 9.5 seconds
    assert row["tgt_tokens_per_s"] == round(60_000 / 19.5, 1)
    assert row["timed_seconds"] == 19.5


def test_eole_rate_weights_each_interval_by_its_seconds():
    intervals, batch_tgt = bench_peers.eole_intervals(EOLE_LOG)
    assert batch_tgt == [3646, 3870, 3730]  # bsz's target tokens, every line
    # each interval's tgt tok/s times its seconds (36 - 28, 44 - 36); the first line's holds the start-up
    assert intervals == [(4, 1010 * 8, 8), (6, 938 * 8, 8)]
    row = bench_peers._peer_row("eole", 50.0, intervals, warmup=2)
    assert row["tgt_tokens_per_s"] == round((1010 * 8 + 938 * 8) / 16, 1)


def _sentence(rng: random.Random, words: list[str]) -> str:  # a capitalised sentence of 3-9 words
    return " ".join(rng.choice(words) for _ in range(rng.randint(3, 9))).capitalize() + "."


def test_the_exported_corpus_is_seq2seq_s_tokens_and_decodes_to_the_training_text(tmp_path):
    english = "a man woman dog runs sits on the green grass near water with two children".split()
    german = "ein mann frau hund läuft sitzt auf dem grünen gras nahe wasser mit zwei kindern".split()
    data = tmp_path / "multi30k"
    data.mkdir()
    for split, n in (("train", 300), ("val", 10), ("test_2016_flickr", 10)):
        for lang, words in (("en", english), ("de", german)):
            lines = [_sentence(random.Random(f"{split}{i}"), words) for i in range(n)]
            (data / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    work = tmp_path / "peers"
    overrides = ["model=small", "data=multi30k", f"data.dir={data}", "data.vocab_size=300"]
    tokens = bench_peers.export_corpus(overrides, work)
    tokenizer = prepare_data(compose_config("train", overrides).data).tokenizers.tgt  # what a run trains on
    marian_vocab = json.loads((work / "vocab.json").read_text(encoding="utf-8"))
    eole_vocab = (work / "vocab.eole").read_text(encoding="utf-8").splitlines()
    assert marian_vocab["</s>"] == 0 and marian_vocab["<unk>"] == 1
    assert sorted(marian_vocab.values()) == list(range(len(marian_vocab)))
    for lang in ("en", "de"):
        original = (data / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        exported = (work / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        assert len(exported) == len(original)
        assert tokens[lang] == sum(len(line.split()) for line in exported)
        for text, pieces in zip(original, exported, strict=True):
            ids = [tokenizer.token_to_id(p) for p in pieces.split()]
            assert None not in ids and tokenizer.decode(ids) == text
            assert all(p in marian_vocab and p in eole_vocab for p in pieces.split())
