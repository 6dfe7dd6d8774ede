"""The Hydra configs in configs/ compose against the typed schema of `seq2seq.config`, and the
validators reject what the types cannot: each error names the offending key."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import DictConfig, OmegaConf

import seq2seq.cli.train  # noqa: F401  (registers the schemas and the seq2seq.* resolvers)
from seq2seq.config import (
    DataConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    TranslateConfig,
    UserError,
    validate_train,
    validate_translate,
)
from seq2seq.model.transformer import build_model

CONFIG_DIR = Path(str(resources.files("seq2seq.configs")))
MODELS = ["tiny", "small", "base", "big"]
OPTIMS = ["adam_noam", "adamw_invsqrt"]
# What each data option needs before validate_train accepts it.
DATA_REQUIRED = {
    "builtin": {},
    "multi30k": {"dir": "/some/multi30k"},
    "parallel_files": {"train_src": "a.src", "train_tgt": "a.tgt", "valid_src": "b.src", "valid_tgt": "b.tgt"},
    "tsv": {"train": "train.tsv", "valid": "valid.tsv"},
    "jsonl": {"train": "train.jsonl", "valid": "valid.jsonl"},
    "hub": {"hub_name": "wmt16"},
}


@pytest.fixture(scope="module")
def hydra_ctx() -> Iterator[None]:
    with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
        yield


def train_cfg(*overrides: str) -> DictConfig:
    return compose(config_name="train", overrides=list(overrides))


def test_the_group_options_are_the_ones_tested():
    """A new YAML file in a group must be added to the lists above (and so get tested)."""
    assert sorted(p.stem for p in (CONFIG_DIR / "model").glob("*.yaml")) == sorted(MODELS)
    assert sorted(p.stem for p in (CONFIG_DIR / "optim").glob("*.yaml")) == sorted(OPTIMS)
    assert sorted(p.stem for p in (CONFIG_DIR / "data").glob("*.yaml")) == sorted(DATA_REQUIRED)


def test_default_train_config(hydra_ctx):
    cfg = train_cfg()
    assert cfg.model.d_model == 64 and cfg.model.encoder_layers == 2  # model: tiny
    assert cfg.data.kind == "builtin" and cfg.data.vocab_size == 300
    assert cfg.optim.name == "adamw" and cfg.optim.schedule == "inverse_sqrt"
    # The built-in task brings the training settings it needs (train.yaml selects experiment/builtin.yaml).
    assert cfg.optim.warmup == 200 and cfg.optim.lr == 2e-3
    assert cfg.max_steps == 2000 and cfg.batch_tokens == 2048 and cfg.best_metric == "accuracy"
    assert (cfg.target, cfg.target_metric, cfg.patience) == (95, "accuracy", 4)
    # Every schema key is present, none added by the YAML files.
    assert set(cfg.keys()) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(cfg.model.keys()) == {f.name for f in dataclasses.fields(ModelConfig)}
    validate_train(cfg)


def _param_count(d: int, ffn: int, enc: int, dec: int, src_vocab: int, tgt_vocab: int) -> int:
    """Post-norm, sinusoidal positions (a buffer), tied output projection, biases everywhere but the output."""
    linear = lambda i, o: i * o + o  # noqa: E731
    attention = linear(d, d) * 4  # Q, K, V and output projections (fused or not, the same count)
    ffn_params = linear(d, ffn) + linear(ffn, d)
    layer_norm = 2 * d
    encoder_layer = attention + ffn_params + 2 * layer_norm
    decoder_layer = 2 * attention + ffn_params + 3 * layer_norm
    embeddings = (src_vocab + tgt_vocab) * d
    return embeddings + enc * encoder_layer + dec * decoder_layer


@pytest.mark.parametrize("name", MODELS)
def test_model_option_composes_validates_and_builds(hydra_ctx, name):
    cfg = train_cfg(f"model={name}")
    expected = {**dataclasses.asdict(ModelConfig()), **_yaml_values(CONFIG_DIR / "model" / f"{name}.yaml", "")}
    assert OmegaConf.to_container(cfg.model) == expected  # the file's sizes, the rest the schema's
    validate_train(cfg)
    m = cfg.model
    if name == "big":  # its full widths, one layer per stack: 29M of its 176M weights, built in a second
        m.encoder_layers = m.decoder_layers = 1
    model = build_model(m, 100, 100, 0)
    count = sum(p.numel() for p in model.parameters())  # the tied output weight is counted once
    assert count == _param_count(m.d_model, m.ffn_dim, m.encoder_layers, m.decoder_layers, 100, 100)
    assert model.output.weight is model.tgt_embed.weight
    assert [len(model.encoder_layers), len(model.decoder_layers)] == [m.encoder_layers, m.decoder_layers]


@pytest.mark.parametrize("name", OPTIMS)
def test_optim_option_composes_and_validates(hydra_ctx, name):
    # With another corpus than the built-in task (whose settings tune optim.lr/warmup for it).
    cfg = train_cfg(f"optim={name}", "data=multi30k", "data.dir=/somewhere")
    expected = {**dataclasses.asdict(OptimConfig()), **_yaml_values(CONFIG_DIR / "optim" / f"{name}.yaml", "")}
    assert OmegaConf.to_container(cfg.optim) == expected
    validate_train(cfg)


@pytest.mark.parametrize("name", sorted(DATA_REQUIRED))
def test_data_option_composes_and_validates(hydra_ctx, name):
    required = DATA_REQUIRED[name]
    cfg = train_cfg(f"data={name}", *(f"data.{k}={v}" for k, v in required.items()))
    assert cfg.data.kind == name
    for key, value in required.items():
        assert cfg.data[key] == value
    validate_train(cfg)
    # The built-in task's training settings (experiment/builtin.yaml) come with data=builtin only.
    schema = {key: value for key, value in dataclasses.asdict(TrainConfig()).items() if not isinstance(value, dict)}
    top_level = {key: cfg[key] for key in schema}
    if name == "builtin":
        schema.update(_yaml_values(CONFIG_DIR / "experiment" / "builtin.yaml", "experiment"))
        schema = {key: value for key, value in schema.items() if "." not in key}
    assert top_level == schema


@pytest.mark.parametrize("name", [n for n, req in DATA_REQUIRED.items() if req])
def test_data_option_without_its_required_keys_is_rejected(hydra_ctx, name):
    """The YAML files mark them ???, but merged onto the schema's None default that marker does not
    make composition fail (OmegaConf keeps the existing value): validate_train is what stops the run."""
    first_key = next(iter(DATA_REQUIRED[name]))
    cfg = train_cfg(f"data={name}")
    assert cfg.data[first_key] is None
    with pytest.raises(UserError, match=rf"^config error: data\.{first_key}=None: "):
        validate_train(cfg)


def test_multi30k_without_data_dir_says_how_to_fetch_it(hydra_ctx):
    with pytest.raises(UserError) as caught:
        validate_train(train_cfg("data=multi30k"))
    assert str(caught.value) == (
        "config error: data.dir=None: multi30k needs the folder of its files "
        "(python scripts/get_multi30k.py <folder> fetches them)"
    )


EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))


def _leaves(tree: dict, prefix: str = "") -> Iterator[tuple[str, object]]:
    """("a.b.c", value) for every leaf of a nested dict."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _yaml_values(path: Path, package: str) -> dict[str, object]:
    """The settings a config file makes, as dotted keys of the composed config (`???` is no setting)."""
    text = path.read_text()
    prefix = "" if "# @package _global_" in text or not package else f"{package}."
    tree = OmegaConf.to_container(OmegaConf.create(text))
    tree.pop("defaults", None)
    return {key: value for key, value in _leaves(tree, prefix) if value != "???"}


def _picks_and_bases(path: Path) -> tuple[dict[str, str], dict[str, object]]:
    """The group options an experiment picks, and the settings of the experiments it builds on (e.g.
    multi30k_en_de on multi30k_base), as dotted keys."""
    picks: dict[str, str] = {}
    settings: dict[str, object] = {}
    for entry in OmegaConf.load(path).get("defaults", []):
        if entry == "_self_":
            continue
        if isinstance(entry, str):  # another experiment: what it picks and sets comes first
            base = CONFIG_DIR / "experiment" / f"{entry}.yaml"
            base_picks, base_settings = _picks_and_bases(base)
            picks.update(base_picks)
            settings.update(base_settings)
            settings.update(_yaml_values(base, "experiment"))
        else:  # override /group: option
            ((key, option),) = entry.items()
            picks[key.removeprefix("override /")] = option
    return picks, settings


def _settings_below(path: Path) -> dict[str, object]:
    """What an experiment gets before its own settings: the group options (train.yaml's, or those it
    picks) and the experiments it builds on."""
    train_picks = {}
    for entry in OmegaConf.load(CONFIG_DIR / "train.yaml").defaults:
        if isinstance(entry, DictConfig) and next(iter(entry)) in ("model", "data", "optim"):
            train_picks.update(entry)
    picks, bases = _picks_and_bases(path)
    below: dict[str, object] = {}
    for group, option in {**train_picks, **picks}.items():
        below.update(_yaml_values(CONFIG_DIR / group / f"{option}.yaml", group))
    return {**below, **bases}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_options_compose(hydra_ctx, name):
    """Every experiment composes and validates once given where its corpus is (data.dir is the user's),
    and every setting it makes, itself, through the group options it picks or through the experiment it
    builds on, is in the result."""
    path = CONFIG_DIR / "experiment" / f"{name}.yaml"
    cfg = train_cfg(f"experiment={name}", "data.dir=/corpus")
    validate_train(cfg)
    expected = _settings_below(path)
    expected.update(_yaml_values(path, "experiment"))  # the experiment's own settings come last
    assert expected, name
    for key, value in expected.items():
        assert OmegaConf.select(cfg, key) == value, key


SCHEMA = OmegaConf.structured(TrainConfig)
GROUP_SCHEMAS = {"model": ModelConfig, "data": DataConfig, "optim": OptimConfig}
# An experiment may name its language pair even where it is its data option's own (multi30k_en_de).
NAMES_ITS_PAIR = {"data.src_lang", "data.tgt_lang"}


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*/*.yaml")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_each_setting_is_stated_once(path):
    """The schema in seq2seq/config.py holds every default; a YAML file states only what differs from
    what lies below it: a group option from the schema, an experiment from the options it picks and
    the experiment it builds on. (`???` marks a required key and is no setting.)"""
    if path.parent.name in GROUP_SCHEMAS:
        schema = OmegaConf.structured(GROUP_SCHEMAS[path.parent.name])
        below = {key: OmegaConf.select(schema, key) for key in _yaml_values(path, "")}
        own = _yaml_values(path, "")
    else:
        below, own = _settings_below(path), _yaml_values(path, "experiment")
        below = {key: below.get(key, OmegaConf.select(SCHEMA, key)) for key in own}
        own = {key: value for key, value in own.items() if key not in NAMES_ITS_PAIR}
    restated = {key: value for key, value in own.items() if below[key] == value}
    assert not restated, f"{path.name} restates what it gets anyway: {restated}"


@pytest.mark.parametrize("name", ["train", "translate"])
def test_the_primary_configs_set_nothing_of_the_schema(name):
    """train.yaml and translate.yaml pick the schema and the groups and configure Hydra; every default
    is the schema's (seq2seq/config.py)."""
    tree = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / f"{name}.yaml"))
    assert set(tree) == {"defaults", "hydra"}


def test_an_experiment_overrides_groups_and_top_level_settings(hydra_ctx, tmp_path):
    """An experiment file may swap groups and change any setting of train.yaml; the command line still wins."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "demo.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /model: small\n"
        "max_steps: 7\nbatch_tokens: 999\nmodel:\n  dropout: 0.2\n"
    )
    search = f"hydra.searchpath=[file://{tmp_path}]"
    cfg = train_cfg(search, "experiment=demo")
    assert (cfg.max_steps, cfg.batch_tokens) == (7, 999)
    assert (cfg.model.d_model, cfg.model.dropout) == (256, 0.2)
    cfg = train_cfg(search, "experiment=demo", "max_steps=9", "model=base")
    assert (cfg.max_steps, cfg.batch_tokens, cfg.model.d_model, cfg.model.dropout) == (9, 999, 512, 0.2)


def test_known_parameter_counts(hydra_ctx):
    """The models of model=small and model=base against counts worked out by hand (not with
    _param_count). small: d=256, ffn=1024, 3+3 layers. Encoder layer 4*(256*256+256) + (256*1024+1024)
    + (1024*256+256) + 4*256 = 263168 + 525568 + 1024 = 789760; decoder layer 526336 + 525568 + 1536
    = 1053440. base, the same way: 3152384 per encoder layer and 4204032 per decoder layer, 44,138,496
    for the 6+6 layers (the paper's ~63M with its shared 37k vocabulary)."""
    small = build_model(train_cfg("model=small").model, 100, 100, 0)
    assert sum(p.numel() for p in small.parameters()) == 200 * 256 + 3 * 789_760 + 3 * 1_053_440
    base = build_model(train_cfg("model=base").model, 100, 100, 0)
    assert sum(p.numel() for p in base.parameters()) == 200 * 512 + 44_138_496


@pytest.mark.slow
def test_big_model_builds_in_full(hydra_ctx):
    m = train_cfg("model=big").model
    model = build_model(m, 100, 100, 0)
    assert sum(p.numel() for p in model.parameters()) == _param_count(1024, 4096, 6, 6, 100, 100)


def test_unknown_key_override_names_the_key(hydra_ctx):
    with pytest.raises(ConfigCompositionException, match=r"model\.d_modle"):
        train_cfg("model.d_modle=3")


def test_wrong_type_override_names_the_key(hydra_ctx):
    with pytest.raises(ConfigCompositionException) as info:
        train_cfg("model.d_model=abc")
    text = str(info.value) + str(info.value.__cause__)
    assert "model.d_model" in text and "abc" in text


def test_unknown_group_option_lists_the_known_ones(hydra_ctx):
    with pytest.raises(MissingConfigException) as info:
        train_cfg("model=huge")
    text = str(info.value)
    assert "model/huge" in text
    for name in MODELS:
        assert name in text


def test_run_dir_resolver_is_registered(hydra_ctx):
    cfg = compose(config_name="train", overrides=["resume=outputs/old"], return_hydra_config=True)
    assert cfg.hydra.run.dir == "outputs/old"
    assert cfg.hydra.output_subdir.startswith(".hydra/resumed-")
    fresh = compose(config_name="train", return_hydra_config=True)
    assert fresh.hydra.run.dir.startswith("outputs/") and fresh.hydra.output_subdir == ".hydra"


@pytest.fixture(scope="module")
def default_train(hydra_ctx) -> DictConfig:
    return train_cfg()


def with_values(cfg: DictConfig, **values: object) -> DictConfig:
    """A copy of `cfg` with dotted keys (given with '__' for '.') set; the schema still checks types."""
    cfg = copy.deepcopy(cfg)
    for key, value in values.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, merge=False)
    return cfg


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"model__d_model": 100, "model__heads": 8}, r"model\.d_model=100: must be divisible by model\.heads=8"),
        ({"model__dropout": -0.1}, r"model\.dropout=-0\.1: must be in \[0, 1\)"),
        ({"model__activation": "swish"}, r"model\.activation='swish': must be one of relu, gelu"),
        (
            {"model__encoder_layers": 4, "model__encoder_drop_residual_layer": 4},
            r"model\.encoder_drop_residual_layer=4: must be null or an encoder layer's index, 0 to .*\(3\)",
        ),
        ({"model__encoder_drop_residual_layer": -1}, r"model\.encoder_drop_residual_layer=-1: must be null or"),
        ({"optim__warmup": 0}, r"optim\.warmup=0: must be positive"),
        ({"max_steps": 0}, r"max_steps=0: must be positive or null"),
        ({"batch_tokens": 65}, r"batch_tokens=65: must hold at least one sentence of data\.max_tokens=64"),
        ({"resume": "runs/a", "init_from": "b.pt"}, r"init_from='b\.pt': cannot be combined with resume"),
        ({"dist_timeout_minutes": 0}, r"dist_timeout_minutes=0(\.0)?: must be positive"),
        ({"dist_wait_minutes": -1}, r"dist_wait_minutes=-1(\.0)?: must be positive"),
        (
            {"optim__schedule": "linear_to_zero", "max_steps": None, "max_minutes": None},
            r"optim\.schedule='linear_to_zero': decays to zero at the end of the budget: set max_minutes or max_steps",
        ),
        ({"precision": "fp8"}, r"precision='fp8': must be one of auto, fp32, bf16, fp16"),
        ({"compile_mode": "fast"}, r"compile_mode='fast': must be one of default, reduce-overhead, max-autotune"),
        # Silently raised to the byte alphabet's 260; now says so.
        ({"data__vocab_size": 200}, r"data\.vocab_size=200: must be at least 260 \(every byte-level vocabulary"),
        (
            {"threads": 0},
            r"threads=0: must be positive, or null for the default \(one thread per core\)",
        ),  # was ignored
        ({"threads": -1}, r"threads=-1: must be positive, or null"),  # was a traceback
        ({"device": "tpu"}, r"device='tpu': must be auto, cpu, cuda or cuda:N"),  # was a traceback
        ({"rdrop_alpha": -1.0}, r"rdrop_alpha=-1\.0: must be >= 0"),
        (
            {"rdrop_alpha": 5.0, "model__dropout": 0.0},
            r"rdrop_alpha=5\.0: needs dropout: with every model dropout at 0 the two passes agree",
        ),
        (
            {"model__share_embeddings": True, "data__joint_vocab": False},
            r"model\.share_embeddings=True: needs data\.joint_vocab=true",
        ),
    ],
)
def test_validate_train_names_the_key(default_train, values, message):
    with pytest.raises(UserError, match=rf"^config error: {message}"):
        validate_train(with_values(default_train, **values))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # Each was accepted: eps=0 trained NaN weights to "(new best)" and exported them, eps=-1 trained
        # nothing, weight_decay=-1 grew the weights; an infinite value made every weight NaN.
        ({"optim__eps": 0.0}, r"optim\.eps=0\.0: must be positive and finite"),
        ({"optim__eps": -1.0}, r"optim\.eps=-1\.0: must be positive and finite"),
        ({"optim__eps": float("inf")}, r"optim\.eps=inf: must be positive and finite"),
        ({"optim__weight_decay": -1.0}, r"optim\.weight_decay=-1\.0: must be >= 0 and finite"),
        ({"optim__weight_decay": float("nan")}, r"optim\.weight_decay=nan: must be >= 0 and finite"),
        ({"optim__lr": float("inf")}, r"optim\.lr=inf: must be positive and finite"),
        ({"optim__factor": float("nan")}, r"optim\.factor=nan: must be positive and finite"),
        ({"optim__clip_norm": float("inf")}, r"optim\.clip_norm=inf: must be >= 0 and finite"),
        ({"optim__betas": [0.9, float("nan")]}, r"optim\.betas=\[0\.9, nan\]: two values in \[0, 1\)"),
        ({"optim__betas": [0.9, 1.0]}, r"optim\.betas=\[0\.9, 1\.0\]: two values in \[0, 1\)"),
        # A ZeroDivisionError at the first update, after the run directory was made.
        ({"log_every": 0}, r"log_every=0: must be positive"),
        # numpy's "Seed must be between 0 and 2**32 - 1", a traceback.
        ({"seed": -1}, r"seed=-1: must be in \[0, 4294967295\] \(what numpy and CTranslate2 take\)"),
        ({"seed": 2**32}, r"seed=4294967296: must be in \[0, 4294967295\] \(what numpy and CTranslate2 take\)"),
        # -1 was a slice's end: every validation sentence but the last.
        ({"valid_max_sentences": -1}, r"valid_max_sentences=-1: must be >= 0 \(0 or null: every validation sentence\)"),
        # libgomp's "Thread creation failed" once training started.
        ({"threads": 100000}, r"threads=100000: must be at most \d+ \(4 x this machine's \d+ CPUs\)"),
        ({"max_minutes": float("inf")}, r"max_minutes=inf: must be positive and finite, or null"),
        ({"rdrop_alpha": float("inf")}, r"rdrop_alpha=inf: must be >= 0 and finite"),
        ({"dist_timeout_minutes": float("inf")}, r"dist_timeout_minutes=inf: must be positive and finite"),
        (
            {"target": float("inf"), "target_metric": "loss"},
            r"target=inf: must be positive or null",
        ),  # any loss reached it
        ({"data__task_test_size": -1}, r"data\.task_test_size=-1: must be >= 0"),
    ],
)
def test_validate_train_refuses_what_trained_wrongly_or_crashed(default_train, values, message):
    with pytest.raises(UserError, match=rf"^config error: {message}$") as info:
        validate_train(with_values(default_train, **values))
    assert isinstance(info.value, ValueError)  # what a Python caller of validate_train catches


def test_validate_train_takes_the_edges_of_the_new_ranges(default_train):
    import os

    validate_train(with_values(default_train, seed=0, valid_max_sentences=0, log_every=1, threads=4 * os.cpu_count()))
    validate_train(with_values(default_train, seed=2**32 - 1, optim__weight_decay=0.0, optim__clip_norm=0.0))


def test_the_vocabulary_floor_is_what_a_tokenizer_trained_smaller_gets():
    from seq2seq.config import BYTE_VOCABULARY_FLOOR
    from seq2seq.data.tokenizer import Tokenizers

    texts = (["a b c"] * 20, ["C B A"] * 20)
    assert Tokenizers.train(*texts, "bpe", 200, joint=True).src.get_vocab_size() == BYTE_VOCABULARY_FLOOR == 256 + 4
    with pytest.raises(Exception, match="not large enough to contain all chars"):  # unigram: a traceback
        Tokenizers.train(*texts, "unigram", 200, joint=True)


def test_validate_train_boundaries(default_train):
    assert default_train.data.max_tokens == 64
    validate_train(with_values(default_train, batch_tokens=66))  # exactly one sentence + BOS/EOS
    validate_train(with_values(default_train, model__d_model=96, model__heads=8, model__dropout=0.0))
    validate_train(with_values(default_train, optim__warmup=1, max_steps=None, resume="runs/a"))


def test_composed_override_reaches_the_validator(hydra_ctx):
    with pytest.raises(UserError, match=r"^config error: optim\.warmup=0: "):
        validate_train(train_cfg("optim=adam_noam", "optim.warmup=0"))


def test_validate_train_on_dataclass():
    validate_train(TrainConfig())
    with pytest.raises(UserError, match=r"model\.d_model=100: must be divisible by model\.heads=8"):
        validate_train(TrainConfig(model=ModelConfig(d_model=100, heads=8)))


def translate_cfg(*overrides: str) -> DictConfig:
    return compose(config_name="translate", overrides=list(overrides))


def test_translate_config_composes(hydra_ctx):
    cfg = translate_cfg("run=x")
    assert cfg.run == "x" and cfg.beam == 5 and cfg.nbest == 1 and cfg.checkpoint is None
    assert set(cfg.keys()) == {f.name for f in dataclasses.fields(TranslateConfig)}
    validate_translate(cfg)
    validate_translate(translate_cfg("checkpoint=a/b.pt"))
    with pytest.raises(ConfigCompositionException, match="bem"):
        translate_cfg("run=x", "bem=3")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["run=x", "beam=0"], r"^config error: beam=0: must be positive"),
        (["run=x", "beam=2", "nbest=3"], r"^config error: nbest=3: must be in \[1, beam=2\]"),
        ([], r"^config error: run=None: give run=<run dir> or checkpoint=<file>"),
        (["run=x", "max_len_b=-5"], r"^config error: max_len_b=-5: must be >= 0$"),  # was named max_len_a=1.5
        (["run=x", "max_len_a=-1"], r"^config error: max_len_a=-1(\.0)?: must be >= 0 and finite$"),
        (["run=x", "threads=0"], r"^config error: threads=0: must be positive, or null"),
        (["run=x", "threads=-1"], r"^config error: threads=-1: must be positive, or null"),
        (["run=x", "device=tpu"], r"^config error: device='tpu': must be auto, cpu, cuda or cuda:N$"),
        # Accepted while sampling=false, though the README lists them as errors.
        (["run=x", "temperature=0"], r"^config error: temperature=0(\.0)?: must be > 0 and finite$"),
        (["run=x", "top_p=2"], r"^config error: top_p=2(\.0)?: must be in \(0, 1\]$"),
        (["run=x", "top_k=-1"], r"^config error: top_k=-1: must be >= 0"),
        # NaN scores and n-best lists in no order; infinities and a 25-digit seed were tracebacks.
        (["run=x", "length_penalty=nan"], r"^config error: length_penalty=nan: must be finite$"),
        (["run=x", "length_penalty=-inf"], r"^config error: length_penalty=-inf: must be finite$"),
        (["run=x", "temperature=inf", "sampling=true"], r"^config error: temperature=inf: must be > 0 and finite$"),
        (["run=x", "max_len_a=inf"], r"^config error: max_len_a=inf: must be >= 0 and finite$"),
        (["run=x", f"seed={10**25}", "sampling=true"], rf"^config error: seed={10**25}: must be in \[0, 4294967295\]"),
        (["run=x", "seed=-1"], r"^config error: seed=-1: must be in \[0, 4294967295\]"),
        (["run=x", "threads=100000"], r"^config error: threads=100000: must be at most \d+ \(4 x this machine's"),
    ],
)
def test_validate_translate_names_the_key(hydra_ctx, overrides, message):
    with pytest.raises(UserError, match=message):
        validate_translate(translate_cfg(*overrides))


# The small model's fp32 update on a 2-core AMD EPYC (AVX2) at idle, the slowest class measured
# (docs/performance.md, CPU classes: 1.82-1.89 s/update); a busy machine makes fewer.
SLOWEST_SECONDS_PER_UPDATE = 1.89


def test_a_five_minute_real_corpus_run_validates_and_draws_attention(hydra_ctx):
    # `data=multi30k max_minutes=5` validated only on its final weights (valid_every=1000), and the
    # Multi30k experiments turned the attention images off: no curve, no images.
    cfg = train_cfg("experiment=multi30k_quick", "data.dir=/corpus")
    validate_train(cfg)
    assert cfg.data.kind == "multi30k" and cfg.model.d_model == 256 and cfg.max_minutes == 5
    updates = cfg.max_minutes * 60 / SLOWEST_SECONDS_PER_UPDATE
    assert updates // cfg.valid_every >= 3  # validations before the final one, on the slowest class
    assert cfg.optim.warmup < updates / 2  # and the learning rate has peaked long before the end
    assert cfg.attention_images and cfg.attention_images_share <= 0.01
    assert cfg.valid_max_sentences is not None and cfg.valid_max_sentences <= 250


def test_the_help_of_a_key_is_its_fields_metadata_not_a_comment_beside_it():
    # It was read back from config.py's source with tokenize, so reformatting the file changed --help.
    from seq2seq.cli.common import described_fields
    from seq2seq.config import setting

    @dataclasses.dataclass
    class Schema:
        size: int = setting(3, "how many")  # a comment is not the help
        plain: bool = False  # nor here
        inner: OptimConfig = dataclasses.field(default_factory=OptimConfig)

    rows = described_fields(Schema)
    assert rows[:2] == [("size", "how many"), ("plain", "")]
    assert ("inner.clip_norm", "max gradient norm; 0 turns clipping off") in rows
    assert Schema().size == 3 and OmegaConf.structured(Schema).size == 3
