"""TensorBoard dashboards, the start/end summary of a training run, and the attention heatmaps.

One tiny training run (module fixture) is read back three ways: TensorBoard's own event reader,
a real `tensorboard` server over HTTP, and `seq2seq-translate attention=DIR` on its checkpoint.
"""

from __future__ import annotations

import io
import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import compose_config, train_logging
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import DEFAULT_SIZE_GUIDANCE, EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

import seq2seq.cli.train  # noqa: F401  (registers the config schema and the resolvers)
from seq2seq.artifacts.checkpoint import load_checkpoint, model_from_checkpoint
from seq2seq.config import ModelConfig
from seq2seq.data.tokenizer import Tokenizers
from seq2seq.inference.attention_plots import draw_attention, render, teacher_forced_attention
from seq2seq.model.transformer import build_model

MAX_STEPS, LOG_EVERY, VALID_EVERY = 4, 2, 3
TRAIN_STEPS = [1, 2, 4]  # step 1, then every log_every
VALID_STEPS = [3, 4]  # every valid_every, then the final weights (4 is not a multiple of 3)
LAYERS = 2  # model=tiny
KINDS = ("encoder", "decoder_self", "cross")
TRAIN_TAGS = ["loss", "ppl", "lr", "grad_norm", "tgt_tokens_per_s", "epoch", "skipped_updates"]
VALID_TAGS = ["loss", "nll", "ppl", "bleu", "chrf", "accuracy", "best_bleu"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A finished 4-update run with two validations; returns (run dir, train() summary, log lines)."""
    tmp = tmp_path_factory.mktemp("dashboards")
    overrides = [
        f"data.cache_dir={tmp / 'cache'}",
        "data.task_train_size=200",
        "data.task_valid_size=20",
        "data.task_max_len=6",  # short sentences: small heatmaps, quick to draw
        f"max_steps={MAX_STEPS}",
        f"log_every={LOG_EVERY}",
        f"valid_every={VALID_EVERY}",
        f"save_every={VALID_EVERY}",
        "progress=false",
        "threads=1",
        "best_metric=bleu",
        "patience=null",
        "attention_images_share=1000",  # every image at every validation (the tiny model trains faster than it draws)
    ]
    cfg = compose_config("train", overrides)
    summary, lines = train_logging(cfg, tmp / "run")
    return tmp / "run", summary, lines


def _events(directory: Path) -> EventAccumulator:
    return EventAccumulator(str(directory), size_guidance={kind: 0 for kind in DEFAULT_SIZE_GUIDANCE}).Reload()


@pytest.fixture(scope="module")
def events(tiny_run) -> EventAccumulator:
    """Everything the run wrote under <run>/tb (size guidance 0: keep every event, not a sample)."""
    return _events(tiny_run[0] / "tb")


def test_every_scalar_is_logged_at_its_steps(events):
    for tag in TRAIN_TAGS:
        assert [e.step for e in events.Scalars(f"train/{tag}")] == TRAIN_STEPS, tag
    for tag in VALID_TAGS:
        assert [e.step for e in events.Scalars(f"valid/{tag}")] == VALID_STEPS, tag
    lr = [e.value for e in events.Scalars("train/lr")]
    assert lr[0] > 0 and lr == sorted(lr)  # still in warmup: rising
    assert all(e.value == 0 for e in events.Scalars("train/skipped_updates"))
    assert all(e.value > 0 for e in events.Scalars("train/tgt_tokens_per_s"))


def test_best_so_far_matches_the_validations(tiny_run, events):
    bleu = [e.value for e in events.Scalars("valid/bleu")]
    best = [e.value for e in events.Scalars("valid/best_bleu")]
    assert best == pytest.approx(list(np.maximum.accumulate(bleu)))
    assert best[-1] == pytest.approx(tiny_run[1]["best"]["value"])


def test_hparams_carry_the_config_and_metrics(tiny_run):
    # In the run's own events: a tb/hparams subdirectory showed up in TensorBoard as a second run.
    assert [p for p in (tiny_run[0] / "tb").iterdir() if p.is_dir()] == []
    events = _events(tiny_run[0] / "tb")
    content = events.PluginTagToContent("hparams")
    assert set(content) == {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"}
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["model.d_model"].number_value == 64
    assert start.hparams["max_steps"].number_value == MAX_STEPS
    assert start.hparams["data.kind"].string_value == "builtin"
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    # The metrics are the validation tags the run writes anyway: their last points are the final
    # weights' and the best. Copies under hparam/* were one-point cards before every learning curve.
    metrics = {m.name.tag for m in experiment.metric_infos}
    assert metrics == {f"valid/{tag}" for tag in VALID_TAGS}
    assert not [tag for tag in events.Tags()["scalars"] if not tag.startswith(("train/", "valid/"))]
    assert events.Scalars("valid/loss")[-1].value == pytest.approx(tiny_run[1]["metrics"]["loss"])


def test_translations_text_has_three_rows_per_validation(events):
    texts = events.Tensors("valid/translations/text_summary")
    assert [e.step for e in texts] == VALID_STEPS
    for event in texts:
        table = event.tensor_proto.string_val[0].decode().splitlines()
        assert table[0] == "| source | reference | translation |"
        rows = table[2:]
        assert len(rows) == 3 and all(row.count("|") == 4 for row in rows)
        # The built-in task reverses and upper-cases: the reference column is the source reversed.
        for row in rows:
            source, reference = (cell.strip() for cell in row.split("|")[1:3])
            assert reference == source.upper()[::-1]


def test_attention_images_for_every_kind_and_layer_of_one_sentence(tiny_run, events):
    expected = {f"attention/{k}/layer_{layer}/sample_1" for k in KINDS for layer in range(1, LAYERS + 1)}
    assert set(events.Tags()["images"]) == expected
    (line,) = [x for x in tiny_run[2] if x.startswith("attention images: ")]
    assert line.startswith(f"attention images: {2 * len(expected)} at 2 of the validations, ")
    for tag in expected:
        images = events.Images(tag)
        assert [e.step for e in images] == VALID_STEPS, tag
        picture = Image.open(io.BytesIO(images[-1].encoded_image_string))
        assert picture.size == (images[-1].width, images[-1].height)
        assert min(picture.size) > 200
        assert _coloured_fraction(picture) > 0.1, tag


def test_start_and_end_summaries_are_logged(tiny_run):
    run_dir, summary, lines = tiny_run
    text = "\n".join(lines)
    model = model_from_checkpoint(load_checkpoint(run_dir / "checkpoints" / "last.pt"))
    params = sum(p.numel() for p in model.parameters())  # the tied output matrix counts once
    assert f"model: {params:,} parameters" in text
    assert "vocabulary: source " in text and "(joint)" in text
    assert "data: 200 training pairs kept, 0 dropped" in text and "20 validation pairs" in text
    assert "tokens x 1 accumulation x 1 ranks per update" in text
    assert "device: cpu" in text
    assert f"tensorboard --logdir {run_dir / 'tb'}" in text
    best = summary["best"]
    assert (
        f"best checkpoint: {run_dir / 'checkpoints' / 'best.pt'} (bleu {best['value']:.2f} at update {best['step']})"
        in text
    )
    # The start summary comes before any validation; the best checkpoint is reported at the very end.
    first = {
        key: next(i for i, line in enumerate(lines) if line.startswith(key)) for key in ("model:", "validation at")
    }
    assert first["model:"] < first["validation at"]
    assert lines[-3].startswith("best checkpoint:")
    assert lines[-2].startswith("target NOT reached: accuracy")  # the built-in task's target, said plainly


# ---- a real TensorBoard server ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.read()


def _wait_for_tags(port: int, plugin: str, tag: str, server: subprocess.Popen, timeout: float = 60.0) -> dict:
    """Polls until the server has loaded the run (it reads the event files in the background)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, "tensorboard exited"
        try:
            tags = json.loads(_get(port, f"/data/plugin/{plugin}/tags"))
            if tag in tags.get(".", {}):
                return tags
        except OSError:  # not listening yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"tensorboard did not serve {plugin} tag {tag} within {timeout} s")


def test_tensorboard_serves_scalars_and_images(tiny_run, tmp_path):
    binary = Path(sys.executable).with_name("tensorboard")
    port = _free_port()
    command = [str(binary), "--logdir", str(tiny_run[0] / "tb"), "--host", "127.0.0.1", "--port", str(port)]
    with open(tmp_path / "tensorboard.log", "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        scalars = _wait_for_tags(port, "scalars", "valid/best_bleu", server)
        assert {f"train/{t}" for t in TRAIN_TAGS} <= set(scalars["."])
        assert set(scalars) == {"."}  # one run, not a second "hparams" one
        query = urllib.parse.urlencode({"run": ".", "tag": "train/loss"})
        assert [point[1] for point in json.loads(_get(port, f"/data/plugin/scalars/scalars?{query}"))] == TRAIN_STEPS
        tag = "attention/cross/layer_2/sample_1"
        _wait_for_tags(port, "images", tag, server)
        query = urllib.parse.urlencode({"run": ".", "tag": tag, "sample": 0})
        listing = json.loads(_get(port, f"/data/plugin/images/images?{query}"))
        assert [entry["step"] for entry in listing] == VALID_STEPS
        picture = Image.open(io.BytesIO(_get(port, f"/data/plugin/images/individualImage?{listing[-1]['query']}")))
        assert _coloured_fraction(picture) > 0.1
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


# ---- seq2seq-translate attention=DIR --------------------------------------------------------------


def _coloured_fraction(picture: Image.Image) -> float:
    """Share of pixels far from white and from grey: heatmap cells, not text or background."""
    rgb = np.asarray(picture.convert("RGB"), dtype=np.int16)
    saturation = rgb.max(axis=-1) - rgb.min(axis=-1)
    return float((saturation > 40).mean())


def test_translate_writes_one_heatmap_per_nonempty_line(tiny_run, tmp_path):
    from seq2seq.cli.translate import translate

    source = tmp_path / "input.txt"
    source.write_text("a b c\n\nd e f g a\n", encoding="utf-8")
    plots = tmp_path / "plots" / "nested"
    overrides = [
        f"run={tiny_run[0]}",
        f"input={source}",
        f"output={tmp_path / 'out.txt'}",
        f"attention={plots}",
        "beam=2",
    ]
    cfg = compose_config("translate", overrides)
    assert translate(cfg)["lines"] == 3
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").count("\n") == 3
    # Named by the 0-based sentence id the n-best lines carry ("0 ||| ..."); the files started at 1.
    assert sorted(p.name for p in plots.iterdir()) == ["sentence_000000.png", "sentence_000002.png"]
    for path in plots.iterdir():
        with Image.open(path) as picture:
            assert picture.format == "PNG" and min(picture.size) > 100
            grey = np.asarray(picture.convert("L"), dtype=np.float64)
            assert grey.std() > 20
            assert _coloured_fraction(picture) > 0.1


# ---- the weights and what is drawn from them ----------------------------------------------------


@pytest.fixture
def model():
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.3, max_positions=32
    )
    return build_model(cfg, 20, 20, 0).train()  # training mode on purpose: the plot must not see dropout


def test_teacher_forced_weights_are_the_ones_decoding_used(model):
    src_ids, out_ids = [5, 9, 7, 11, 2], [6, 8, 10]
    weights = teacher_forced_attention(model, src_ids, out_ids)
    assert model.training  # left as it was
    assert [w.shape for w in weights["encoder"]] == [(4, 5, 5)] * 2
    assert [w.shape for w in weights["decoder_self"]] == [(4, 4, 4)] * 2
    assert [w.shape for w in weights["cross"]] == [(4, 4, 5)] * 2
    for layers in weights.values():
        for w in layers:
            torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5, rtol=0.0)
    for w in weights["decoder_self"]:
        assert torch.all(w.triu(1) == 0)  # no row looks at a later output
    # Step by step as greedy decoding runs it (KV cache, one token at a time): the same rows.
    model.eval()
    with torch.inference_mode():
        state = model.start_decoding(torch.tensor([src_ids]))
        for t, token in enumerate([1, *out_ids]):  # BOS, then each output
            record = {}
            model.decode(torch.tensor([[token]]), state.memory, state.src_mask, state, record)
            for layer in range(2):
                torch.testing.assert_close(
                    record["cross"][layer][0, :, 0], weights["cross"][layer][:, t], atol=1e-5, rtol=0.0
                )
                self_row = record["decoder_self"][layer][0, :, 0]
                torch.testing.assert_close(self_row, weights["decoder_self"][layer][:, t, : t + 1], atol=1e-5, rtol=0.0)


def _tiles(image: np.ndarray) -> list[np.ndarray]:
    """Split a mosaic at its all-blank rows and columns, row by row."""

    def bands(filled: np.ndarray) -> list[slice]:
        edges = np.flatnonzero(np.diff(np.concatenate([[0], filled.astype(int), [0]])))
        return [slice(a, b) for a, b in zip(edges[::2], edges[1::2], strict=True)]

    blank = np.isnan(image)
    return [
        image[r, c]
        for r in bands(~blank.all(axis=1))
        for c in bands(~blank.all(axis=0))
        if not np.isnan(image[r, c]).all()
    ]


def test_heatmap_shows_the_weights_with_token_labels():
    weights = torch.rand(3, 4, 5).softmax(-1)
    columns, rows = ["▁a", "b", "$", "c", "</s>"], ["x", "▁y", "z", "</s>"]
    fig = draw_attention(weights, columns, rows, "cross", with_mean=True)
    heat = fig.axes[0].images[0]
    tiles = _tiles(np.ma.filled(heat.get_array().astype(float), np.nan))
    expected = [weights.mean(0), *weights]
    assert len(tiles) == 4
    for tile, want in zip(tiles, expected, strict=True):
        np.testing.assert_allclose(tile, want.numpy(), atol=1e-6)
    assert heat.get_clim() == pytest.approx((0.0, float(weights.max())))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert {"mean of heads", "head 1", "head 2", "head 3"} <= set(texts)
    assert {"▁a", "b", r"\$", "</s>", "▁y"} <= set(texts)  # '$' escaped, else matplotlib reads mathtext
    assert len(fig.axes) == 2  # the mosaic and its colour bar
    image = render(fig)
    height, width = fig.get_size_inches()[::-1] * fig.dpi
    assert image.dtype == np.uint8 and image.shape[2] == 3
    assert abs(image.shape[0] - height) <= 1 and abs(image.shape[1] - width) <= 1


def test_bad_attention_directory_fails_before_translating(tiny_run, tmp_path):
    from seq2seq.cli.translate import translate
    from seq2seq.config import UserError

    (tmp_path / "input.txt").write_text("a b\n", encoding="utf-8")
    blocker = tmp_path / "a_file"
    blocker.write_text("", encoding="utf-8")
    overrides = [f"run={tiny_run[0]}", f"input={tmp_path / 'input.txt'}", f"output={tmp_path / 'out.txt'}"]
    cfg = compose_config("translate", [*overrides, f"attention={blocker / 'plots'}"])
    with pytest.raises(UserError, match="attention="):
        translate(cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "input.txt"]  # no output=, nothing beside it


def test_token_labels_read_as_text():
    # Byte-level BPE spells 'ü' as 'Ã¼' and a space as 'Ġ'; the plot labels must show 'ü' and '▁'.
    texts = ["über die Brücke", "grüne Äpfel", "die Brücke ist grün"] * 5
    tokenizers = Tokenizers.train(texts, texts, "bpe", 300, joint=True)
    pieces = tokenizers.src_tokens("grüne Brücke")
    assert "".join(pieces) == "grüne▁Brücke"
    ids = tokenizers.encode_tgt(["Äpfel über"])[0]
    assert "".join(tokenizers.tgt_tokens(ids)) == "Äpfel▁über"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_shows_this_updates_figures(tmp_path):
    from seq2seq.train.reporting import Dashboard

    terminal = Terminal()
    dashboard = Dashboard(tmp_path, 0, 100, True, stream=terminal)
    dashboard.bar.mininterval = 0  # draw on every update, as a slow update would
    dashboard.progress(1, loss="9.000")
    dashboard.progress(49, loss="1.000")
    last_drawn = terminal.getvalue().split("\r")[-1]
    dashboard.close()
    assert "50/100" in last_drawn and "loss=1.000" in last_drawn  # it showed update 1's loss at update 50


def test_redirected_progress_is_plain_lines(tmp_path, monkeypatch):
    """Not a terminal: no carriage returns, a line at the first update and then one every 30 s of the
    clock, and whatever is written next starts a line of its own (it was glued to the last bar)."""
    import seq2seq.train.reporting as lines_module
    import seq2seq.train.reporting as module

    clock = [0.0]
    monkeypatch.setattr(lines_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    file = io.StringIO()
    dashboard = module.Dashboard(tmp_path, 0, 100, True, stream=file)
    for step in range(1, 101):
        clock[0] = float(step)  # one update a second
        dashboard.progress(1, loss=f"{10 - step / 20:.3f}", tok_s="1,000")
        if step == 50:
            file.write("validation at update 50\n")  # what the log writes between updates
    dashboard.close()
    text = file.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    # Written at 1 s, then 31, 61 and 91 s: updates 1, 31, 61, 91, with this update's figures.
    shown = [line for line in lines if line.startswith("update ")]
    assert [re.match(r"update (\d+)/100 ", line).group(1) for line in shown] == ["1", "31", "61", "91"]
    assert shown[1] == "update 31/100 (31%), 0.5 min, 1.00 updates/s, loss=8.450, tok_s=1,000"
    assert lines == [*shown[:2], "validation at update 50", *shown[2:]]


def test_on_a_terminal_log_lines_are_printed_above_the_bar(tmp_path, monkeypatch):
    """A log line written while the bar is drawn starts a line of its own (it was glued after the bar);
    the console handler is given back when the dashboard closes."""
    import logging

    from seq2seq.train.reporting import Dashboard

    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)  # the console handler's stream, as Hydra's is stdout
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    monkeypatch.setattr(logging.root, "handlers", [console])
    dashboard = Dashboard(tmp_path, 0, 100, True, stream=terminal)
    dashboard.bar.mininterval = 0
    dashboard.progress(1, loss="9.000")
    logging.getLogger("seq2seq.train").warning("validation at update 1")
    dashboard.progress(1, loss="8.000")
    dashboard.close()
    text = terminal.getvalue()
    at = text.index("[WARNING] validation at update 1\n")
    assert text[at - 1] in "\r\n" and "1/100" in text[:at] and "2/100" in text[at:]
    assert logging.root.handlers == [console]


def test_a_redirected_training_run_writes_no_carriage_returns(tmp_path, capsys):
    # The built-in demo's output, redirected to a file, was 141 KB of tqdm redraws.
    overrides = ["data.task_train_size=200", "data.task_valid_size=10", "max_steps=6", "log_every=2"]
    overrides += ["valid_every=6", "save_every=6", "progress=true", "threads=1", "attention_images=false"]
    train_logging(compose_config("train", [*overrides, f"data.cache_dir={tmp_path / 'cache'}"]), tmp_path / "run")
    captured = capsys.readouterr()
    assert "\r" not in captured.err + captured.out
    assert re.findall(r"^update 1/6 \(17%\), .*, tok_s=[\d,]+$", captured.err, re.MULTILINE)


def test_progress_bar_total_follows_the_time_budget_when_it_binds(tmp_path, monkeypatch):
    import seq2seq.train.reporting as module

    clock = [0.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    dashboard = module.Dashboard(tmp_path, 0, 100_000, False, deadline=600.0)
    clock[0] = 60.0
    dashboard.progress(10)  # 6 s per update, 540 s left: 90 more updates fit
    assert dashboard.bar.total == 100
    clock[0] = 120.0
    dashboard.progress(30)  # 40 updates in 120 s, 480 s left: 160 more
    assert dashboard.bar.total == 200
    dashboard.close()
    steps_bound = module.Dashboard(tmp_path, 0, 150, False, deadline=600.0)
    steps_bound.progress(30)
    assert steps_bound.bar.total == 150  # max_steps binds first
    steps_bound.close()


def test_progress_bar_moves_on_every_update(tmp_path, monkeypatch):
    from seq2seq.train.reporting import Dashboard

    moves = []
    progress = Dashboard.progress
    monkeypatch.setattr(Dashboard, "progress", lambda self, steps, **kw: moves.append(steps) or progress(self, steps))
    overrides = ["data.task_train_size=200", "data.task_valid_size=10", "max_steps=6", "log_every=50"]
    overrides += ["valid_every=6", "save_every=6", "progress=false", "threads=1", "attention_images=false"]
    train_logging(compose_config("train", [*overrides, f"data.cache_dir={tmp_path / 'cache'}"]), tmp_path / "run")
    assert moves == [1] * 6  # it used to move every log_every updates (and at update 1)


def test_attention_images_stay_within_their_share_of_the_training_time(tmp_path, monkeypatch):
    import seq2seq.inference.attention_plots as plots
    from seq2seq.train.reporting import Dashboard

    image = np.zeros((4, 4, 3), dtype=np.uint8)
    orders = []
    now = [0.0]  # the dashboard's clock: an image costs 0.05 s of it exactly, whatever the machine's load

    def images(samples, kinds):  # 6 images of 0.05 s each, drawn as they are asked for
        orders.append(kinds)
        for number in range(6):
            now[0] += 0.05
            yield f"attention/{kinds[number % 3]}/layer_{number}/sample_1", image

    monkeypatch.setattr(plots, "translate_with_attention", lambda translator, sources: sources)
    monkeypatch.setattr(plots, "attention_images", images)
    dashboard = Dashboard(tmp_path, 0, 10, progress=False, attention_share=0.01, clock=lambda: now[0])
    try:
        # 1% of 12 s is 0.12 s: after the third image (0.15 s) it stops, overrunning by less than one image.
        assert dashboard.attention(1, None, ["a"], training_seconds=12.0) == 3
        assert dashboard.attention_seconds == pytest.approx(0.15)
        assert dashboard.attention(2, None, ["a"], training_seconds=14.0) == 0  # 0.14 s allowed: spent
        assert dashboard.attention(3, None, ["a"], training_seconds=100.0) == 6  # 1 s allowed: all six
        assert orders[0][0] == "cross"  # the most telling kind first
    finally:
        dashboard.close()


def test_a_held_loss_says_which_update_it_is_of(tmp_path, monkeypatch):
    """The first hour: `loss=9.486, lr=4.00e-05` on every line from update 1 to 18 while the count moved,
    as if the run were frozen. The loss and lr are read back every log_every updates only (a GPU sync);
    a line drawn after that says which update they are of."""
    import seq2seq.train.reporting as lines_module
    import seq2seq.train.reporting as module

    clock = [0.0]
    monkeypatch.setattr(lines_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    file = io.StringIO()
    dashboard = module.Dashboard(tmp_path, 0, 100, True, stream=file)
    shown = {}
    for step in range(1, 41):
        clock[0] = 31.0 * step  # a slow CPU update: every update draws a line
        if step in (1, 20):  # the trainer's read-backs (log_every=20, and update 1)
            loss, lr = 9.486 - step / 10, step * 4e-5
            dashboard.scalars(step, {"train/loss": loss, "train/lr": lr, "train/ppl": 1.0})
            shown = {"loss": f"{loss:.3f}", "lr": f"{lr:.2e}"}  # what the trainer passes
        dashboard.progress(1, **shown, tok_s="100")
    dashboard.close()
    lines = file.getvalue().splitlines()
    figures = [line.split("updates/s, ")[1] for line in lines]
    assert figures[0] == "loss=9.386, lr=4.00e-05, tok_s=100"
    assert figures[17] == "loss=9.386 (update 1), lr=4.00e-05, tok_s=100"  # update 18
    assert figures[19] == "loss=7.486, lr=8.00e-04, tok_s=100"
    assert figures[39] == "loss=7.486 (update 20), lr=8.00e-04, tok_s=100"
    # Without the trainer passing them, the figures are the dashboard's own.
    bare = module.Dashboard(tmp_path, 0, 100, True, stream=io.StringIO())
    bare.scalars(1, {"train/loss": 2.0, "train/lr": 1e-3})
    clock[0] += 100
    bare.progress(1, tok_s="5")
    clock[0] += 100
    bare.progress(1, tok_s="5")
    assert bare.lines.stream.getvalue().splitlines()[1].endswith("loss=2.000 (update 1), lr=1.00e-03, tok_s=5")
    bare.close()


def test_a_budget_of_three_images_draws_one_of_every_kind(tmp_path, monkeypatch):
    """multi30k_quick's one validation drew 3 images under the 1% budget, all cross-attention (layers
    1-3): decoder_self never appeared. Each kind's last layer comes first (a 2-layer encoder's layer 2
    beside the decoder's layer 3), then the layer before each."""
    import torch

    import seq2seq.inference.attention_plots as plots
    from seq2seq.train.reporting import Dashboard

    clock = [0.0]

    def render(figure):  # each image costs a second of the run's clock
        clock[0] += 1.0
        return np.zeros((4, 4, 3), dtype=np.uint8)

    monkeypatch.setattr(plots, "render", render)
    monkeypatch.setattr(plots, "draw_attention", lambda weights, columns, rows, title: title)
    layers = {"encoder": 2, "decoder_self": 3, "cross": 3}
    sample = plots.SentenceAttention({k: [torch.zeros(1, 2, 2)] * n for k, n in layers.items()}, [], [], [])
    monkeypatch.setattr(plots, "translate_with_attention", lambda translator, sources: [sample])
    dashboard = Dashboard(tmp_path, 0, 10, progress=False, attention_share=0.01, clock=lambda: clock[0])
    drawn = []
    monkeypatch.setattr(dashboard.writer, "add_image", lambda tag, *args, **kwargs: drawn.append(tag))
    try:
        assert dashboard.attention(1, None, ["a"], training_seconds=300.0) == 3  # 3 s allowed
        assert drawn == [
            "attention/cross/layer_3/sample_1",
            "attention/encoder/layer_2/sample_1",
            "attention/decoder_self/layer_3/sample_1",
        ]
        assert dashboard.attention(2, None, ["a"], training_seconds=10_000.0) == 8  # all: 3 + 3 + 2 layers
        assert sorted(drawn[3:]) == sorted(
            f"attention/{k}/layer_{n}/sample_1" for k in layers for n in range(1, layers[k] + 1)
        )
    finally:
        dashboard.close()
