"""`train(cfg)`: a whole training run, from a composed config to the best checkpoint.

The Hydra entry point (seq2seq/cli/train.py) only calls this; tests call it directly. It sets the run
up (its config, checked once; the device and process group; the run directory; the data, recipe and
precision) and hands over to the Trainer, which owns the run from there (seq2seq/train/trainer.py);
then it reports the summary and writes the exports. The caller's config is left as it was given.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from seq2seq import cpu_sharing
from seq2seq.allocator import allocator_in_use
from seq2seq.artifacts.checkpoint import TrainingState, load_training_state
from seq2seq.artifacts.huggingface import has_language_codes, pretrained_model_config
from seq2seq.artifacts.marian import is_huggingface_model, local_directory
from seq2seq.artifacts.replacing import write_files_into, write_new_file
from seq2seq.artifacts.run_dir import INFERENCE_DIR, LOCK_FREE_STARTUP_FILES, MARKER_TEXT, RunDir
from seq2seq.config import (
    AUTO_RECIPE,
    TRAIN_GROUPS,
    UserError,
    as_dict,
    check_weights_source,
    validate_recipes,
    validate_train,
)
from seq2seq.data.directions import LANGUAGE_CODES
from seq2seq.data.pipeline import prepare_data
from seq2seq.data.tokenizer import is_pretrained_tokenizer_directory
from seq2seq.device import pick_device, use_deterministic_algorithms
from seq2seq.inference.target_language import UNNAMED, translate_command
from seq2seq.precision import log_choice
from seq2seq.train.distributed import (
    DistContext,
    cleanup_distributed,
    init_distributed,
    lost_peer,
    lost_peer_message,
)
from seq2seq.train.init_from import init_weights_from
from seq2seq.train.lock import holds_run_directory, run_directory_lock
from seq2seq.train.recipe import choose_recipe
from seq2seq.train.resume import check_same_corpus, resumed_config
from seq2seq.train.rng import seed_everything
from seq2seq.train.run_compile import choose_compile
from seq2seq.train.run_outputs import (
    BeforeStart,
    check_new_run_directory,
    check_writable,
    clear_earlier_run,
    files_not_a_runs,
    holds_only_startup_files,
)
from seq2seq.train.run_precision import choose_run_precision
from seq2seq.train.trainer import STOPPED_BY_SIGNAL, Trainer

log = logging.getLogger("seq2seq.train")
GROUPS = TRAIN_GROUPS


def log_summary(trainer: Trainer) -> None:
    data, cfg = trainer.data, trainer.cfg
    run_dir, device, dist = trainer.run_dir, trainer.device, trainer.dist
    params = sum(p.numel() for p in trainer.model.parameters())
    stats = data.stats
    log.info("model: %s parameters (%s)", f"{params:,}", ", ".join(f"{k}={v}" for k, v in as_dict(cfg.model).items()))
    log.info(
        "vocabulary: source %d, target %d (%s)",
        data.tokenizers.src.get_vocab_size(),
        data.tokenizers.tgt.get_vocab_size(),
        "joint" if data.tokenizers.joint else "separate",
    )
    if cfg.data.streaming:
        log.info(
            "data: streamed from the corpus files, %d pairs at a time (tokenizer learnt from the first %d); "
            "%d validation pairs",
            cfg.data.stream_buffer_pairs,
            stats.tokenizer_pairs,
            len(data.valid),
        )
    else:
        log.info(
            "data: %d training pairs kept, %d dropped (%d empty, %d too long, %d length ratio); %d validation pairs",
            stats.train_kept,
            stats.train_pairs - stats.train_kept,
            stats.dropped_empty,
            stats.dropped_too_long,
            stats.dropped_length_ratio,
            len(data.valid),
        )
    log.info(
        "batches: %d tokens x %d accumulation x %d ranks per update; %d batches per %s",
        cfg.batch_tokens,
        cfg.accum_steps,
        dist.world_size,
        len(trainer.stream),
        "buffer" if cfg.data.streaming else "epoch",
    )
    log.info("device: %s, %d threads, %s allocator", device, torch.get_num_threads(), allocator_in_use())
    if device.type == "cpu":
        log.info(cpu_sharing.describe_this_process())
    log_choice(trainer.precision_choice, log)
    log.info("run directory: %s   (tensorboard --logdir %s)", run_dir, RunDir(run_dir).tb)


def train(
    cfg: DictConfig,
    run_dir: Path | str,
    overrides: list[str] | None = None,
    before: BeforeStart | None = None,
    checked: bool = False,
    started: float | None = None,
) -> dict[str, Any]:
    """Trains as `cfg` says and returns the final summary (best metric, step, checkpoint path).

    The steps, in order: the run's config (a resumed run's own, or a Marian model's architecture); the
    device and the process group; the run directory (agreed by the ranks, checked writable, locked,
    cleared of an interrupted run's leftovers); the Trainer (data, recipe, precision, weights); its fit;
    the summary and exports. A start that fails takes back what it added to the run directory: `before`
    is the directory as it stood before the start (seq2seq-train notes it before Hydra writes there).
    `checked`: the caller validated `cfg` (seq2seq-train does, before torch loads), so it is not again.
    `started`: when the command started, on `Trainer.clock` (default: now): max_minutes counts from
    there. A run that ends without a single update (max_minutes spent before it) is an error, and takes
    back what it added, as a failed start does: it has nothing to translate with."""
    run_dir, overrides = Path(run_dir), overrides or []
    before = before or BeforeStart.of(run_dir)
    # A directory this process claimed is seq2seq-train's: checked before Hydra wrote into it (or new,
    # made by Hydra just now), and writable (the lock is written there). From code, train() checks it.
    claimed = holds_run_directory(run_dir)
    with before.taken_back_on_failure(claimed):
        cfg, payload = _run_config(cfg, overrides, checked)
        if not cfg.resume and not claimed:
            check_new_run_directory(run_dir, cfg.overwrite)
    device = pick_device(cfg.device)
    dist = init_distributed(device, cfg.dist_timeout_minutes, cfg.dist_wait_minutes)
    device = dist.device if dist.enabled else device  # cuda:LOCAL_RANK under torchrun
    try:
        with contextlib.ExitStack() as held:
            if dist.enabled:
                run_dir = _agree_on_run_dir(run_dir, dist)
            _set_up_this_process(cfg, device, dist.rank)
            start = Trainer.clock() if started is None else started
            if dist.is_main:  # before tokenizing: a bad output directory should not cost minutes of work first
                if not claimed:
                    check_writable(run_dir)
                    run_dir.mkdir(parents=True, exist_ok=True)
                held.enter_context(run_directory_lock(run_dir))
            with before.taken_back_on_failure(dist.is_main):  # rank 0 holds the lock: no other run writes there
                if dist.is_main:
                    _clear_leftovers(cfg, run_dir)
                trainer = _build_trainer(cfg, run_dir, device, dist, payload, overrides, start)
            set_up_minutes = (Trainer.clock() - start) / 60.0
            if dist.is_main:
                log_summary(trainer)
            reason = trainer.run()
            if trainer.step == 0 and reason != STOPPED_BY_SIGNAL:
                if dist.is_main:
                    before.take_back()
                raise UserError(_no_update_message(cfg, trainer.cfg, reason, set_up_minutes))
            return _finish(trainer, reason, run_dir)
    except RuntimeError as error:
        if lost_peer(error, dist):  # a raw gloo/NCCL message would not say what happened or what to do
            raise UserError(lost_peer_message(error, dist, cfg.dist_timeout_minutes, str(run_dir))) from error
        raise
    finally:
        cleanup_distributed()


def _no_update_message(asked: DictConfig, chosen: DictConfig, reason: str, set_up_minutes: float) -> str:
    """Why a run made no update and what to change: `asked` is the config as given (recipe=auto),
    `chosen` the one trained with (the recipe it chose)."""
    message = f"no update made ({reason}), so there is no run to translate with; nothing of it was kept"
    if not asked.max_minutes:
        return message
    timed = " and timing recipe=auto's candidates" if asked.recipe == AUTO_RECIPE else ""
    message += f": {set_up_minutes:.1f} of max_minutes={asked.max_minutes:g} went to preparing the data{timed}"
    if asked.recipe == AUTO_RECIPE:
        return (
            message + f"; give more minutes, or name a recipe (recipe={chosen.recipe}, its choice) to skip the timing"
        )
    return message + "; give more minutes"


def _run_config(cfg: DictConfig, overrides: list[str], checked: bool) -> tuple[DictConfig, TrainingState | None]:
    """The config this run trains with, validated once, and the training state it resumes from (or
    None). A resumed run's config and a Marian model's architecture are new here: validated here."""
    cfg, payload = copy.deepcopy(cfg), None  # edited below (a Marian model's architecture, ...): ours now
    check_weights_source(cfg.resume, cfg.init_from)  # before resumed_config drops init_from
    if cfg.resume:
        payload = load_training_state(RunDir(cfg.resume).find_checkpoint(prefer=("last",)))
        cfg, checked = resumed_config(cfg, overrides, payload.config), False
        check_same_corpus(payload.corpus, cfg.data, cfg.resume)
    elif cfg.init_from and is_huggingface_model(cfg.init_from):
        cfg, checked = pretrained_config(cfg, overrides), False
    elif cfg.data.tokenizer == "sentencepiece":
        cfg = sentencepiece_config(cfg, overrides)  # decoder_start=pad: a valid choice, whatever was checked
    if not checked:
        validate_train(cfg)
        validate_recipes(cfg)
    return cfg, payload


def _set_up_this_process(cfg: DictConfig, device: torch.device, rank: int) -> None:
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    if cfg.deterministic:
        use_deterministic_algorithms(device)
    seed_everything(cfg.seed + rank)


def _clear_leftovers(cfg: DictConfig, run_dir: Path) -> None:
    """Rank 0, holding the run directory's lock: an earlier run's files (overwrite=true) and the
    unfinished writes of an interrupted one; then the marker that says the directory is a run's."""
    if not cfg.resume and cfg.overwrite and (removed := clear_earlier_run(run_dir)):
        log.info("overwrite=true: removed the earlier run's %s from %s", ", ".join(removed), run_dir)
    if stale := RunDir(run_dir).remove_stale_temporaries():
        log.info("removed %s bytes of unfinished checkpoint writes from an interrupted run", f"{stale:,}")
    if stale := _remove_stale_exports(run_dir):
        log.info("removed %s bytes of unfinished exports from an interrupted run", f"{stale:,}")
    if not (marker := RunDir(run_dir).marker).is_file():
        marker.write_text(MARKER_TEXT, encoding="utf-8")


def _build_trainer(
    cfg: DictConfig,
    run_dir: Path,
    device: torch.device,
    dist: DistContext,
    payload: TrainingState | None,
    overrides: list[str],
    start: float,
) -> Trainer:
    """The data, the recipe (chosen on a new run), the precision, and the Trainer with its weights:
    restored (resume=), imported (init_from=) or fresh."""
    pretrained = _pretrained_tokenizers(cfg)
    data = prepare_data(cfg.data, barrier=dist.wait_for_main, is_main=dist.is_main, pretrained=pretrained)
    if dist.is_main:
        # A resumed run saves the tokenizer it has: files replaced whole (or not at all), never rewritten in place.
        write_files_into(run_dir, data.tokenizers.save)
        if data.cleaning is not None:  # data.clean's report, beside the run's other records
            report = json.dumps(data.cleaning, indent=1, ensure_ascii=False) + "\n"
            write_new_file(RunDir(run_dir).cleaning_report, lambda path: path.write_text(report))
    if payload is None:  # a resumed run's config holds the recipe it chose
        cfg = choose_recipe(cfg, overrides, data, device, dist, Trainer.clock, start)
    precision = choose_run_precision(cfg, device, dist)
    cfg = choose_compile(cfg, data, device, dist, precision.precision, Trainer.clock)  # auto: measured here
    trainer = Trainer(cfg, run_dir, data, device, dist, started=start, precision=precision)
    if payload is not None:
        trainer.restore(payload)
        log.info(
            "resumed %s at update %d (epoch %d) after %.1f minutes of training%s",
            cfg.resume,
            trainer.step,
            trainer.stream.epoch,
            trainer.budget.elapsed_before / 60.0,
            f"; max_minutes={cfg.max_minutes} counts them" if cfg.max_minutes else "",
        )
    elif cfg.init_from:
        init_weights_from(trainer.model, cfg.init_from, cfg, trainer.vocab)
        log.info("initialised weights from %s", cfg.init_from)
    return trainer


def pretrained_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The run's config with the architecture of the Marian model init_from names: model.* comes from
    it (a command-line override of an architecture key is an error), and the vocabulary is its."""
    directory = local_directory(cfg.init_from)
    cfg.model = pretrained_model_config(directory, overrides, cfg.model)
    if has_language_codes(directory):
        language_code_data(cfg, overrides)
    else:
        cfg.data.joint_vocab = not (directory / "target_vocab.json").is_file()
    return cfg


# What says which tokenizer a run trains: an NLLB-200/M2M-100 model brings its own.
OWN_TOKENIZER_KEYS = ("data.joint_vocab", "data.tokenizer", "data.vocab_size", "data.sentencepiece_type")


def language_code_data(cfg: DictConfig, overrides: list[str]) -> None:
    """An NLLB-200 or M2M-100 model is trained in its own layout (data.lang_tag=language_codes: each
    source starts with its language's code, each target with its own after </s>), on its one vocabulary;
    a run of one direction is data.directions=[src_lang-tgt_lang], so that both codes are put in."""
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key == "data.lang_tag" and value != LANGUAGE_CODES:
            raise UserError(
                f"'{override}': init_from={cfg.init_from} is an NLLB-200/M2M-100 model, trained with its own layout "
                f"(data.lang_tag={LANGUAGE_CODES}: its language codes, not >>xx<< tags); drop the override"
            )
        if key in OWN_TOKENIZER_KEYS and not (key == "data.joint_vocab" and value.lower() == "true"):
            raise UserError(
                f"'{override}': init_from={cfg.init_from} is an NLLB-200/M2M-100 model, whose one vocabulary and "
                "SentencePiece model are its own (a Marian model's separate vocabularies are not); drop the override"
            )
    cfg.data.lang_tag, cfg.data.joint_vocab = LANGUAGE_CODES, True
    if not cfg.data.directions:
        if cfg.data.kind == "builtin" or cfg.data.src_lang in UNNAMED or cfg.data.tgt_lang in UNNAMED:
            raise UserError(
                f"init_from={cfg.init_from}: an NLLB-200/M2M-100 model needs its languages named: data.src_lang and "
                "data.tgt_lang (or data.directions) as its codes (eng_Latn, __en__'s en) or ISO 639-1 codes (en, de)"
            )
        cfg.data.directions = [f"{cfg.data.src_lang}-{cfg.data.tgt_lang}"]


def sentencepiece_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """A new run with data.tokenizer=sentencepiece starts its targets from pad, as Marian models do:
    its vocabulary has no <s> (seq2seq.data.sentencepiece_training), and the formats it exports to
    (Marian, CTranslate2's converter, Argos) start the decoder from pad's zero vector."""
    if any(o.lstrip("+").startswith("model.decoder_start=") and not o.endswith("=pad") for o in overrides):
        raise UserError(
            "model.decoder_start: data.tokenizer=sentencepiece has no <s>; its targets start from pad (drop the override)"
        )
    cfg.model.decoder_start = "pad"
    return cfg


def _pretrained_tokenizers(cfg: DictConfig) -> Path | None:
    """Where the run's SentencePiece tokenizers come from, if it has them: the run directory being
    resumed, or the Marian model it starts from; None: the run trains its own tokenizer."""
    if cfg.resume:
        return Path(cfg.resume) if is_pretrained_tokenizer_directory(Path(cfg.resume)) else None
    if cfg.init_from and is_huggingface_model(cfg.init_from):
        return local_directory(cfg.init_from)
    return None


def _agree_on_run_dir(run_dir: Path, dist: DistContext) -> Path:
    """Hydra names the run directory from each process's clock; ranks use rank 0's. The one Hydra made
    for this rank goes, unless another run has taken it since (started in the same second)."""
    chosen = Path(dist.broadcast(str(run_dir)))
    if chosen != run_dir and holds_only_startup_files(run_dir, LOCK_FREE_STARTUP_FILES):
        shutil.rmtree(run_dir, ignore_errors=True)
    return chosen


def _remove_stale_exports(run_dir: Path) -> int:
    from seq2seq.artifacts.export import remove_stale_export_directories

    return remove_stale_export_directories(run_dir)


def hydra_argument(key: str, value: str) -> str:
    """`key=value` as a shell word that Hydra reads back as `value`: Hydra's grammar takes only a few
    characters unquoted (not a space, not ü), and the shell must keep the quotes Hydra needs."""
    if re.fullmatch(r"[A-Za-z0-9_./:+@%-]+", value):
        return f"{key}={value}"
    # Inside Hydra's quotes a backslash is itself only before a quote or at the end, where it is doubled.
    escaped = re.sub(r"(\\+)(?='|$)", lambda run: run.group(1) * 2, value).replace("'", "\\'")
    argument = f"{key}='{escaped}'"
    # Double quotes read best, where the shell leaves everything inside them as it is.
    return f'"{argument}"' if not re.search(r'["$`\\!]', argument) else shlex.quote(argument)


def _write_inference_exports(run_dir: Path) -> None:
    """What translation reads (seq2seq.artifacts.export.write_run_exports), logged. A failure here
    costs nothing: the checkpoints are intact and translation falls back to them."""
    from seq2seq.artifacts.export import RUN_EXPORTS, write_run_exports

    if not RunDir(run_dir).has_checkpoints():
        return
    # An export replaces its directory whole: one that holds a file no run wrote (a resumed run's
    # directory, where the user put notes into model/) is left alone, with its file.
    foreign = {name: found[0] for name in RUN_EXPORTS if (found := files_not_a_runs(run_dir, True, (name,)))}
    for name, found in foreign.items():
        log.warning("%s/ not written: it holds %s, which no run wrote (translation reads the checkpoint)", name, found)
    try:
        written = write_run_exports(run_dir, skip=tuple(foreign))
    except (UserError, OSError) as err:
        log.warning("no export for translation written (translation reads the checkpoint): %s", err)
        return
    for name, output in written.items():
        if isinstance(output, UserError):
            log.warning("%s/ not written (translation reads the checkpoint): %s", name, output)
            continue
        size = sum(f.stat().st_size for f in output.iterdir()) / 1e6
        how = "seq2seq-translate run= engine=torch" if name == INFERENCE_DIR else "seq2seq-translate run=, the default"
        log.info("for translation: %s (%s, %.0f MB; %s)", output, RUN_EXPORTS[name], size, how)


def _finish(trainer: Trainer, reason: str, run_dir: Path) -> dict[str, Any]:
    cfg = trainer.cfg
    summary: dict[str, Any] = {"reason": reason, "step": trainer.step, "minutes": trainer.budget.minutes_since_start()}
    summary.update(best=trainer.best, metrics=trainer.last_metrics, run_dir=str(run_dir))
    if trainer.stop_signal is not None:  # the shell's convention: 130 after Ctrl-C, 143 after SIGTERM
        summary["exit_status"] = 128 + trainer.stop_signal
    if trainer.dist.is_main:
        resumed = (
            f" ({trainer.budget.elapsed_minutes():.1f} minutes of training in all)"
            if trainer.budget.elapsed_before
            else ""
        )
        log.info("stopped: %s after %d updates in %.1f minutes%s", reason, trainer.step, summary["minutes"], resumed)
        if reason == STOPPED_BY_SIGNAL:  # out now: the exports are written when the resumed run ends
            log.info("exports for translation not written (stopped by signal); translation reads the checkpoint")
        else:
            _write_inference_exports(run_dir)
        if trainer.best:
            metrics = ", ".join(f"{k} {v:.2f}" for k, v in trainer.last_metrics.items())
            log.info("final validation: %s", metrics)
            best_path = RunDir(run_dir).checkpoint("best")
            if best_path.is_file():  # never name a file that is not there
                log.info(
                    "best checkpoint: %s (%s %.2f at update %d)",
                    best_path,
                    cfg.best_metric,
                    trainer.best["value"],
                    trainer.best["step"],
                )
            else:
                log.warning("best checkpoint: %s was not written (the run was interrupted while saving it)", best_path)
        if cfg.target is not None:  # said plainly, last before the commands
            value = trainer.last_metrics.get(cfg.target_metric)
            last = f"{cfg.target_metric} {value:.2f}" if value is not None else "no validation"
            if trainer.target_reached():
                log.info("target reached: %s (target %g) at update %d", last, cfg.target, trainer.step)
            else:
                log.warning("target NOT reached: %s at the last validation, target %g (%s)", last, cfg.target, reason)
        log.info("translate with:  %s", translate_command("run", run_dir, cfg.data))
        if reason == STOPPED_BY_SIGNAL:
            log.info("resume with:     seq2seq-train %s", hydra_argument("resume", str(run_dir)))
    return summary
