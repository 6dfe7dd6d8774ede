"""`train(plan)`: seq2seq-train's work on the plan of a run (seq2seq/train/plan.py), from the device to
the best checkpoint.

cli/train.py builds the plan (`train(cfg, run_dir)` there, for code that has a config: the tests, a
script) and seq2seq-distill's student builds its own; nothing here reads a config. It sets the run up
(the device and process group; the run directory; the data, recipe and precision) and hands over to
the Trainer, which owns the run from there (seq2seq/train/trainer.py); then it reports the summary and
writes the exports.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import torch

from seq2seq import cpu_sharing
from seq2seq.allocator import allocator_in_use
from seq2seq.artifacts.replacing import write_files_into, write_new_file
from seq2seq.artifacts.run_dir import INFERENCE_DIR, LOCK_FREE_STARTUP_FILES, RunDir
from seq2seq.config import AUTO_RECIPE, UserError, compile_setting
from seq2seq.data.pipeline import prepare_corpus
from seq2seq.device import pick_device, use_deterministic_algorithms
from seq2seq.inference.target_language import translate_command
from seq2seq.precision import log_choice
from seq2seq.train.distributed import (
    DistContext,
    cleanup_distributed,
    init_distributed,
    lost_peer,
    lost_peer_message,
)
from seq2seq.train.init_from import init_weights_from
from seq2seq.train.lock import run_directory_lock
from seq2seq.train.parts import TrainingParts
from seq2seq.train.plan import RunPlan, with_compile
from seq2seq.train.recipe import choose_recipe
from seq2seq.train.rng import seed_everything
from seq2seq.train.run_compile import choose_compile
from seq2seq.train.run_outputs import (
    BeforeStart,
    check_writable,
    clear_leftovers,
    files_not_a_runs,
    holds_only_startup_files,
)
from seq2seq.train.run_precision import choose_run_precision
from seq2seq.train.trainer import STOPPED_BY_SIGNAL, Trainer

log = logging.getLogger("seq2seq.train")


def log_summary(trainer: Trainer) -> None:
    data, record, batches = trainer.data, trainer.loop.record, trainer.parts.batches
    run_dir, device, dist = trainer.run_dir, trainer.device, trainer.dist
    params = sum(p.numel() for p in trainer.model.parameters())
    stats = data.stats
    log.info("model: %s parameters (%s)", f"{params:,}", ", ".join(f"{k}={v}" for k, v in record["model"].items()))
    log.info(
        "vocabulary: source %d, target %d (%s)",
        data.tokenizers.src.get_vocab_size(),
        data.tokenizers.tgt.get_vocab_size(),
        "joint" if data.tokenizers.joint else "separate",
    )
    if record["data"]["streaming"]:
        log.info(
            "data: streamed from the corpus files, %d pairs at a time (tokenizer learnt from the first %d); "
            "%d validation pairs",
            record["data"]["stream_buffer_pairs"],
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
        batches.batch_tokens,
        batches.accum_steps,
        dist.world_size,
        len(trainer.stream),
        "buffer" if record["data"]["streaming"] else "epoch",
    )
    log.info("device: %s, %d threads, %s allocator", device, torch.get_num_threads(), allocator_in_use())
    if device.type == "cpu":
        log.info(cpu_sharing.describe_this_process())
    log_choice(trainer.precision_choice, log)
    log.info("run directory: %s   (tensorboard --logdir %s)", run_dir, RunDir(run_dir).tb)


def train(plan: RunPlan, before: BeforeStart, started: float | None = None) -> dict[str, Any]:
    """Trains as `plan` says and returns the final summary (best metric, step, checkpoint path).

    The steps, in order: the device and the process group; the run directory (agreed by the ranks,
    checked writable, locked, cleared of an interrupted run's leftovers); the Trainer (data, recipe,
    precision, weights); its fit; the summary and exports. A start that fails takes back what it added
    to the run directory: `before` is the directory as it stood before the start (seq2seq-train notes it
    before Hydra writes there). `started`: when the command started, on `Trainer.clock` (default: now):
    max_minutes counts from there. A run that ends without a single update (max_minutes spent before it)
    is an error, and takes back what it added, as a failed start does: it has nothing to translate with."""
    run_dir, config = plan.run_dir, plan.config
    with before.taken_back_on_failure(plan.claimed):  # device=cuda:N that this machine lacks, a rank not met
        device = pick_device(config.device)
        dist = init_distributed(device, config.dist_timeout_minutes, config.dist_wait_minutes)
    device = dist.device if dist.enabled else device  # cuda:LOCAL_RANK under torchrun
    try:
        with contextlib.ExitStack() as held:
            if dist.enabled:
                run_dir = _agree_on_run_dir(run_dir, dist)
            _set_up_this_process(config.threads, config.deterministic, config.seed + dist.rank, device)
            start = Trainer.clock() if started is None else started
            if dist.is_main:  # before tokenizing: a bad output directory should not cost minutes of work first
                if not plan.claimed:
                    check_writable(run_dir)
                    run_dir.mkdir(parents=True, exist_ok=True)
                held.enter_context(run_directory_lock(run_dir))
            with before.taken_back_on_failure(dist.is_main):  # rank 0 holds the lock: no other run writes there
                if dist.is_main:
                    clear_leftovers(run_dir, overwrite=config.overwrite and not config.resume)
                trainer = _build_trainer(plan, run_dir, device, dist, start)
            set_up_minutes = (Trainer.clock() - start) / 60.0
            if dist.is_main:
                log_summary(trainer)
            reason = trainer.run()
            if trainer.step == 0 and reason != STOPPED_BY_SIGNAL:
                if dist.is_main:
                    before.take_back()
                chosen = trainer.loop.record["recipe"]
                raise UserError(_no_update_message(config.max_minutes, config.recipe, chosen, reason, set_up_minutes))
            return _finish(trainer, reason, run_dir)
    except RuntimeError as error:
        if lost_peer(error, dist):  # a raw gloo/NCCL message would not say what happened or what to do
            raise UserError(lost_peer_message(error, dist, config.dist_timeout_minutes, str(run_dir))) from error
        raise
    finally:
        cleanup_distributed()


def _no_update_message(max_minutes: float | None, asked: str, chosen: str, reason: str, set_up_minutes: float) -> str:
    """Why a run made no update and what to change: `asked` is the recipe as given (recipe=auto),
    `chosen` the one trained with (the recipe it chose)."""
    message = f"no update made ({reason}), so there is no run to translate with; nothing of it was kept"
    if not max_minutes:
        return message
    timed = " and timing recipe=auto's candidates" if asked == AUTO_RECIPE else ""
    message += f": {set_up_minutes:.1f} of max_minutes={max_minutes:g} went to preparing the data{timed}"
    if asked == AUTO_RECIPE:
        return message + f"; give more minutes, or name a recipe (recipe={chosen}, its choice) to skip the timing"
    return message + "; give more minutes"


def _set_up_this_process(threads: int | None, deterministic: bool, seed: int, device: torch.device) -> None:
    if threads is not None:
        torch.set_num_threads(threads)
    if deterministic:
        use_deterministic_algorithms(device)
    seed_everything(seed)


def _build_trainer(plan: RunPlan, run_dir: Path, device: torch.device, dist: DistContext, start: float) -> Trainer:
    """The data, the recipe (chosen on a new run), the precision, and the Trainer with its weights:
    restored (resume=), imported (init_from=) or fresh."""
    data = prepare_corpus(plan.corpus, barrier=dist.wait_for_main, is_main=dist.is_main)
    if dist.is_main:
        # A resumed run saves the tokenizer it has: files replaced whole (or not at all), never rewritten in place.
        write_files_into(run_dir, data.tokenizers.save)
        if data.cleaning is not None:  # data.clean's report, beside the run's other records
            report = json.dumps(data.cleaning, indent=1, ensure_ascii=False) + "\n"
            write_new_file(RunDir(run_dir).cleaning_report, lambda path: path.write_text(report))
    chosen, timed = plan.config, None
    if plan.recipes is not None:  # None: recipe=fixed, or a resume (its config holds the recipe it chose)
        choice = choose_recipe(plan.recipes, data, device, dist, Trainer.clock, start)
        chosen, timed = choice.candidate.config, choice.pace
    precision = choose_run_precision(chosen.precision, chosen.model.d_model, chosen.model.ffn_dim, device, dist)
    if compile_setting(chosen.compile) == "auto":  # measured here, on the data and the device
        eager, compiled = (TrainingParts.of(chosen, device, compiled=c) for c in (False, True))
        pays = choose_compile(eager, compiled, data, device, dist, precision, Trainer.clock, timed)
        chosen = with_compile(chosen, pays)
    parts = TrainingParts.of(chosen, device)
    trainer = Trainer(parts, run_dir, data, device, dist, started=start, precision=precision)
    if plan.resumed is not None:
        trainer.restore(plan.resumed)
        log.info(
            "resumed %s at update %d (epoch %d) after %.1f minutes of training%s",
            chosen.resume,
            trainer.step,
            trainer.stream.epoch,
            trainer.budget.elapsed_before / 60.0,
            f"; max_minutes={chosen.max_minutes} counts them" if chosen.max_minutes else "",
        )
    elif plan.init_from is not None:
        init_weights_from(trainer.model, plan.init_from, trainer.loop.record["model"], trainer.vocab, data.tokenizers)
        log.info("initialised weights from %s", plan.init_from.given)
    return trainer


def _agree_on_run_dir(run_dir: Path, dist: DistContext) -> Path:
    """Hydra names the run directory from each process's clock; ranks use rank 0's. The one Hydra made
    for this rank goes, unless another run has taken it since (started in the same second)."""
    chosen = Path(dist.broadcast(str(run_dir)))
    if chosen != run_dir and holds_only_startup_files(run_dir, LOCK_FREE_STARTUP_FILES):
        shutil.rmtree(run_dir, ignore_errors=True)
    return chosen


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
    """What translation reads (seq2seq.artifacts.exports.write_run_exports), logged. A failure here
    costs nothing: the checkpoints are intact and translation falls back to them."""
    from seq2seq.artifacts.exports import RUN_EXPORTS, write_run_exports

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
    loop = trainer.loop
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
                    loop.best_metric,
                    trainer.best["value"],
                    trainer.best["step"],
                )
            else:
                log.warning("best checkpoint: %s was not written (the run was interrupted while saving it)", best_path)
        if loop.target is not None:  # said plainly, last before the commands
            value = trainer.last_metrics.get(loop.target_metric)
            last = f"{loop.target_metric} {value:.2f}" if value is not None else "no validation"
            if trainer.target_reached():
                log.info("target reached: %s (target %g) at update %d", last, loop.target, trainer.step)
            else:
                log.warning("target NOT reached: %s at the last validation, target %g (%s)", last, loop.target, reason)
        log.info("translate with:  %s", translate_command("run", run_dir, loop.record["data"]))
        if reason == STOPPED_BY_SIGNAL:
            log.info("resume with:     seq2seq-train %s", hydra_argument("resume", str(run_dir)))
    return summary
