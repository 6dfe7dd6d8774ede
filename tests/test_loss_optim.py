"""The training loss (`seq2seq.train.loss`) against PyTorch's own cross-entropy, and the optimiser
and learning-rate schedules (`seq2seq.train.optim`) against the formulas written out here."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from seq2seq.artifacts.checkpoint import upgrade
from seq2seq.config import ModelConfig, OptimConfig
from seq2seq.model.transformer import Transformer
from seq2seq.train import loss as loss_module
from seq2seq.train.loss import TeacherForcedLoss, label_smoothed_loss
from seq2seq.train.optim import build_optimizer, inverse_sqrt_lr, linear_to_zero_lr, noam_lr, schedule

PAD = 0
VOCAB = 11


def padded_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T, V) logits and (B, T) targets, right-padded with PAD to different lengths."""
    generator = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn(4, 6, VOCAB, generator=generator)
    target = torch.randint(1, VOCAB, (4, 6), generator=generator)
    for row, length in enumerate([6, 3, 1, 5]):
        target[row, length:] = PAD
    return logits, target


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3, 0.9])
def test_label_smoothed_loss_matches_torch_cross_entropy(eps: float) -> None:
    logits, target = padded_batch()
    real = target != PAD
    loss, nll = label_smoothed_loss(logits[real], target[real], eps)
    expected = F.cross_entropy(
        logits.view(-1, VOCAB), target.view(-1), label_smoothing=eps, ignore_index=PAD, reduction="sum"
    )
    expected_nll = F.cross_entropy(logits.view(-1, VOCAB), target.view(-1), ignore_index=PAD, reduction="sum")
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert nll.item() == pytest.approx(expected_nll.item(), rel=1e-5)


def test_label_smoothed_loss_is_fp32_for_low_precision_logits() -> None:
    logits, target = padded_batch(1)
    real = target != PAD
    low = logits[real].to(torch.bfloat16)
    loss, nll = label_smoothed_loss(low, target[real], 0.1)
    assert loss.dtype == nll.dtype == torch.float32
    expected = F.cross_entropy(low.float(), target[real], label_smoothing=0.1, reduction="sum")
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_label_smoothed_loss_gradient_matches_torch() -> None:
    logits, target = padded_batch(2)
    real = target != PAD
    ours = logits[real].clone().requires_grad_()
    theirs = logits[real].clone().requires_grad_()
    label_smoothed_loss(ours, target[real], 0.2)[0].backward()
    F.cross_entropy(theirs, target[real], label_smoothing=0.2, reduction="sum").backward()
    torch.testing.assert_close(ours.grad, theirs.grad)


def tiny_model(dropout: float = 0.0) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1, dropout=dropout, max_positions=16
    )
    return Transformer(cfg, VOCAB, VOCAB, PAD).eval()


def _teacher_forced_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    src = torch.tensor([[4, 5, 6, 2], [7, 2, 0, 0], [3, 8, 2, 0]])
    tgt_out = torch.tensor([[5, 6, 7, 2, 0], [9, 2, 0, 0, 0], [4, 4, 4, 4, 2]])
    tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), tgt_out[:, :-1]], dim=1).masked_fill(tgt_out == PAD, PAD)
    return src, tgt_in, tgt_out


@pytest.mark.parametrize("chunk_rows", [1024, 3])  # one chunk, and chunks that split the rows unevenly
def test_teacher_forced_loss_matches_cross_entropy_on_full_logits(monkeypatch, chunk_rows: int) -> None:
    """The fused, chunked projection + loss (hand-written backward) against F.cross_entropy on the
    full (B, T, V) logits with ignore_index: same loss, NLL and gradients for every parameter."""
    monkeypatch.setattr(loss_module, "CHUNK_ROWS", chunk_rows)
    model = tiny_model()
    src, tgt_in, tgt_out = _teacher_forced_batch()
    loss, nll = TeacherForcedLoss(model, smoothing=0.1)(src, tgt_in, tgt_out)
    loss.backward()
    ours = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    logits = model(src, tgt_in)
    flat_logits, flat_target = logits.view(-1, VOCAB), tgt_out.view(-1)
    reference = F.cross_entropy(flat_logits, flat_target, label_smoothing=0.1, ignore_index=PAD, reduction="sum")
    reference.backward()
    torch.testing.assert_close(loss, reference)
    torch.testing.assert_close(nll, F.cross_entropy(flat_logits, flat_target, ignore_index=PAD, reduction="sum"))
    for name, param in model.named_parameters():
        torch.testing.assert_close(ours[name], param.grad, msg=lambda report, name=name: f"{name}: {report}")


@pytest.mark.parametrize("free_gib", [70.0, 1.0])
def test_a_gpu_computes_the_loss_in_one_chunk_where_memory_allows(monkeypatch, free_gib: float) -> None:
    """Each chunk is ~50 operators (kernel launches); on a GPU a chunk's fp32 logits may take a 16th
    of the free memory, at least 256 MiB. Their sum is the same for any chunking (the test above, at 3
    rows and at 1024)."""
    free = int(free_gib * 2**30)
    monkeypatch.setattr(loss_module, "free_gpu_bytes", lambda index: free)
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert loss_module.chunk_rows(8000, cpu) == loss_module.chunk_rows(64000, cpu) == 1024
    budget = max(free // 16, 256 * 2**20)  # bytes of fp32 logits
    assert loss_module.chunk_rows(8000, gpu) == budget // (4 * 8000)
    assert loss_module.chunk_rows(500_000, gpu) == max(budget // (4 * 500_000), 1024)  # never fewer than a CPU's
    if free_gib == 70.0:  # an H100 after the forward of base at 32k tokens: the loss is one chunk
        assert loss_module.chunk_rows(8000, gpu) >= 32 * 1024 and loss_module.chunk_rows(32000, gpu) >= 32 * 1024
    else:  # a GPU nearly full: the 256 MiB floor, 8,388 rows at 8k
        assert loss_module.chunk_rows(8000, gpu) == 8388


def test_teacher_forced_loss_under_bf16_autocast_stays_close() -> None:
    model = tiny_model()
    src, tgt_in, tgt_out = _teacher_forced_batch()
    exact, _ = TeacherForcedLoss(model, smoothing=0.1)(src, tgt_in, tgt_out)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, _ = TeacherForcedLoss(model, smoothing=0.1)(src, tgt_in, tgt_out)
    assert low.dtype == torch.float32
    assert abs(float(low) - float(exact)) / float(exact) < 0.02


def _rdrop_reference(model: Transformer, batch: tuple, smoothing: float, alpha: float) -> tuple:
    """The paper's R-Drop loss, halved, from the model's full (2B, T, V) logits of the batch stacked
    twice (F.cross_entropy with ignore_index, F.kl_div over the real positions), and KL(P1||P2)."""
    src, tgt_in, tgt_out = batch
    first, second = model(torch.cat([src, src]), torch.cat([tgt_in, tgt_in])).chunk(2)
    real = tgt_out != PAD

    def ce(logits, eps):
        return F.cross_entropy(
            logits.view(-1, VOCAB), tgt_out.view(-1), label_smoothing=eps, ignore_index=PAD, reduction="sum"
        )

    log_p, log_q = first[real].log_softmax(-1), second[real].log_softmax(-1)
    kl_pq = F.kl_div(log_q, log_p, log_target=True, reduction="sum")  # KL(P1 || P2)
    kl_qp = F.kl_div(log_p, log_q, log_target=True, reduction="sum")
    nll = (ce(first, 0.0) + ce(second, 0.0)) / 2
    return (ce(first, smoothing) + ce(second, smoothing) + alpha / 2 * (kl_pq + kl_qp)) / 2, nll.detach(), kl_pq


def test_rdrop_loss_and_gradients_match_the_papers_formula() -> None:
    """Same random stream, so the same dropout masks: the objective's loss and every gradient against
    the paper's formula written with torch's own cross-entropy and KL; the copies' masks differ."""
    model = tiny_model(dropout=0.3).train()
    batch = _teacher_forced_batch()
    objective = TeacherForcedLoss(model, smoothing=0.1, rdrop_alpha=5.0).train()
    torch.manual_seed(7)
    loss, nll = objective(*batch)
    loss.backward()
    ours = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    torch.manual_seed(7)
    reference, reference_nll, kl = _rdrop_reference(model, batch, 0.1, 5.0)
    reference.backward()
    assert float(kl) > 1e-3  # the two passes differ: the consistency term is not trivially zero
    torch.testing.assert_close(loss, reference)
    torch.testing.assert_close(nll, reference_nll)
    for name, param in model.named_parameters():
        torch.testing.assert_close(ours[name], param.grad, msg=lambda report, name=name: f"{name}: {report}")


def test_rdrop_runs_the_batch_twice_in_training_only(monkeypatch) -> None:
    """Validation (eval mode) encodes each sentence once, as without R-Drop: no dropout there, so a
    second copy would cost a pass and change nothing."""
    model = tiny_model(dropout=0.3)
    rows = []
    encode = model.encode
    monkeypatch.setattr(model, "encode", lambda src: rows.append(src.size(0)) or encode(src))
    objective = TeacherForcedLoss(model, smoothing=0.1, rdrop_alpha=5.0)
    objective.train()(*_teacher_forced_batch())
    objective.eval()(*_teacher_forced_batch())
    assert rows == [6, 3]


def noam_reference(step: int, d_model: int, warmup: int, factor: float) -> float:
    """Linear rise to factor/sqrt(d_model*warmup) at `warmup`, then factor/sqrt(d_model*step)."""
    if step <= warmup:
        return factor * step / (math.sqrt(d_model) * warmup * math.sqrt(warmup))
    return factor / math.sqrt(d_model * step)


def inverse_sqrt_reference(step: int, peak: float, warmup: int) -> float:
    return peak * step / warmup if step <= warmup else peak * math.sqrt(warmup / step)


@pytest.mark.parametrize("step", [1, 2, 50, 99, 100, 101, 400, 10_000])
def test_noam_lr_formula(step: int) -> None:
    assert noam_lr(step, 64, 100, 2.0) == pytest.approx(noam_reference(step, 64, 100, 2.0), rel=1e-12)


@pytest.mark.parametrize("step", [1, 2, 50, 99, 100, 101, 400, 10_000])
def test_inverse_sqrt_lr_formula(step: int) -> None:
    assert inverse_sqrt_lr(step, 7e-4, 100) == pytest.approx(inverse_sqrt_reference(step, 7e-4, 100), rel=1e-12)


def test_schedules_peak_at_warmup() -> None:
    steps = range(1, 301)
    noam = [noam_lr(s, 512, 100, 1.0) for s in steps]
    inv = [inverse_sqrt_lr(s, 1e-3, 100) for s in steps]
    assert max(steps, key=lambda s: noam[s - 1]) == 100
    assert max(steps, key=lambda s: inv[s - 1]) == 100
    assert noam[99] == pytest.approx(1.0 / math.sqrt(512 * 100), rel=1e-12)
    assert inv[99] == pytest.approx(1e-3, rel=1e-12)


def test_schedules_treat_step_zero_as_step_one() -> None:
    assert noam_lr(0, 512, 100, 1.0) == noam_lr(1, 512, 100, 1.0) > 0
    assert inverse_sqrt_lr(0, 1e-3, 100) == inverse_sqrt_lr(1, 1e-3, 100) > 0


def optim_config(**overrides: object) -> OptimConfig:
    kwargs: dict[str, object] = {"warmup": 5, "betas": [0.8, 0.95], "eps": 1e-6, "lr": 3e-3, "factor": 2.0}
    kwargs.update(overrides)
    return OptimConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["noam", "inverse_sqrt"])
def test_learning_rate_follows_schedule(kind: str) -> None:
    cfg, d_model = optim_config(schedule=kind), 32
    expected = (
        (lambda s: noam_reference(s, d_model, 5, 2.0))
        if kind == "noam"
        else (lambda s: inverse_sqrt_reference(s, 3e-3, 5))
    )
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = build_optimizer([param], cfg, d_model)
    for update in range(1, 13):  # the lr used by update n is lr_at(n)
        assert schedule(cfg, d_model)(update) == pytest.approx(expected(update), rel=1e-9)
        param.grad.copy_(torch.ones(3))
        optimizer.step()
        assert optimizer.lr == pytest.approx(expected(update), rel=1e-9)


@pytest.mark.parametrize(("name", "reference"), [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)])
def test_optimizer_matches_torch_optim(name: str, reference: type) -> None:
    """Our Adam/AdamW against torch.optim's over 12 updates of a warmup schedule, with weight decay
    and one parameter whose gradient is zero on some updates (its moments decay and AdamW's decay
    applies, as torch.optim does for a zero gradient: flat parameters always have one)."""
    cfg = optim_config(name=name, weight_decay=0.05, schedule="inverse_sqrt")
    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    optimizer = build_optimizer(ours, cfg, 16)
    torch_optimizer = reference(theirs, lr=1.0, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05, foreach=False)
    lr_at = schedule(cfg, 16)
    for update in range(1, 13):
        grads = [torch.randn(4, 3), torch.randn(5) if update % 3 else torch.zeros(5)]
        for param, grad in zip(ours, grads, strict=True):
            param.grad.copy_(grad)  # into the flat buffer's view: replacing it would be refused
        for param, grad in zip(theirs, grads, strict=True):
            param.grad = grad.clone()
        optimizer.step()
        for group in torch_optimizer.param_groups:
            group["lr"] = lr_at(update)
        torch_optimizer.step()
        for mine, reference_param in zip(ours, theirs, strict=True):
            torch.testing.assert_close(mine.detach(), reference_param.detach(), rtol=1e-6, atol=1e-7)


def test_optimizer_state_survives_a_round_trip_and_reads_torch_checkpoints() -> None:
    """Resuming continues identically, from our own state dict and from a torch.optim AdamW one
    (the format of checkpoints written before the optimizer was ours, as the checkpoint's upgrade gives it)."""
    cfg = optim_config(name="adamw", weight_decay=0.01, schedule="inverse_sqrt")
    torch.manual_seed(1)
    grads = [torch.randn(6) for _ in range(6)]
    param = torch.nn.Parameter(torch.randn(6))
    reference = torch.nn.Parameter(param.detach().clone())
    torch_optimizer = torch.optim.AdamW([reference], lr=1.0, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.01)
    for update, grad in enumerate(grads[:3], start=1):
        reference.grad = grad.clone()
        torch_optimizer.param_groups[0]["lr"] = schedule(cfg, 16)(update)
        torch_optimizer.step()
    # A checkpoint of those days, read as every checkpoint is: upgraded.
    from_torch = upgrade({"format": 1, "model": {}, "rng": [], "optimizer": torch_optimizer.state_dict()})["optimizer"]
    for source in ("torch", "ours"):
        if source == "torch":
            saved = from_torch
        else:  # our own format: save after loading the torch one (into an optimizer of its own parameter)
            first = build_optimizer([torch.nn.Parameter(reference.detach().clone())], cfg, 16)
            first.load_state_dict(from_torch)
            saved = first.state_dict()
        untouched = copy.deepcopy(saved)
        resumed_param = torch.nn.Parameter(reference.detach().clone())
        resumed = build_optimizer([resumed_param], cfg, 16)
        resumed.load_state_dict(saved)
        assert resumed.updates == 3
        uninterrupted = copy.deepcopy(torch_optimizer)
        uninterrupted_param = uninterrupted.param_groups[0]["params"][0]
        for update, grad in enumerate(grads[3:], start=4):
            resumed_param.grad.copy_(grad)
            uninterrupted_param.grad = grad.clone()
            resumed.step()
            uninterrupted.param_groups[0]["lr"] = schedule(cfg, 16)(update)
            uninterrupted.step()
        torch.testing.assert_close(resumed_param.detach(), uninterrupted_param.detach(), rtol=1e-6, atol=1e-7)
        # What was loaded from (this iteration's `saved`) is left as it was.
        for i, entry in saved["state"].items():
            for name in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(entry[name], untouched["state"][i][name]), (source, name)


def test_first_adam_update_matches_formula() -> None:
    """First step of Adam: bias-corrected m = g and v = g^2, so the update is lr * g / (|g| + eps)."""
    cfg = optim_config(schedule="inverse_sqrt", eps=0.5)  # a large eps makes its place in the formula visible
    start = torch.tensor([1.0, -2.0, 0.5, 3.0])
    grad = torch.tensor([0.3, -1.0, 2.0, 0.0])
    param = torch.nn.Parameter(start.clone())
    optimizer = build_optimizer([param], cfg, 16)
    param.grad.copy_(grad)
    optimizer.step()
    lr = inverse_sqrt_reference(1, 3e-3, 5)
    torch.testing.assert_close(param.detach(), start - lr * grad / (grad.abs() + 0.5))


@pytest.mark.parametrize(("step", "used"), [(1, 0.0), (3, 0.01), (10, 0.2), (10, 0.95), (50, 1.0), (50, 1.3)])
def test_linear_to_zero_lr_is_the_lower_of_warmup_and_decay(step: int, used: float) -> None:
    warmup_line = 2e-3 * step / 10
    decay_line = 2e-3 * (1.0 - used)
    expected = max(0.0, min(warmup_line, decay_line))
    assert linear_to_zero_lr(step, 2e-3, 10, used) == pytest.approx(expected, rel=1e-12, abs=0.0)


def test_linear_to_zero_follows_the_budget_it_is_given() -> None:
    """The optimiser asks for the budget used when each update starts; update n's rate comes from it."""
    cfg = optim_config(schedule="linear_to_zero", lr=1e-3, warmup=2)
    asked: list[int] = []

    def budget_used(step: int) -> float:
        asked.append(step)
        return (step - 1) / 8  # 8 updates in all

    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = build_optimizer([param], cfg, 16, budget_used)
    rates = []
    for _ in range(8):
        param.grad.copy_(torch.ones(3))
        optimizer.step()
        rates.append(optimizer.lr)
    assert asked == list(range(1, 9))
    expected = [5e-4, 1e-3 * 7 / 8, 1e-3 * 6 / 8, 1e-3 * 5 / 8, 1e-3 * 4 / 8, 1e-3 * 3 / 8, 1e-3 * 2 / 8, 1e-3 / 8]
    assert rates == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="budget"):
        schedule(cfg, 16)


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adams_arithmetic_for_the_compiler_is_the_fused_kernels(name: str) -> None:
    """compile=true traces `step_in_graph` (plain operators the compiler fuses) where an eager update
    calls the fused kernel: run eagerly, both make the same 6 updates, and both skip a non-finite one
    (weights, moments and step counts untouched)."""
    cfg = optim_config(name=name, weight_decay=0.05, schedule="inverse_sqrt")
    torch.manual_seed(0)
    fused_params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    traced_params = [torch.nn.Parameter(p.detach().clone()) for p in fused_params]
    fused, traced = build_optimizer(fused_params, cfg, 16), build_optimizer(traced_params, cfg, 16)
    for update in range(1, 8):
        skip = update == 4
        grads = [torch.randn(4, 3), torch.randn(5)]
        for params in (fused_params, traced_params):
            for param, grad in zip(params, grads, strict=True):
                param.grad.copy_(grad)
        found_inf = torch.tensor(1.0 if skip else 0.0)
        before = [p.detach().clone() for p in traced_params]
        fused.step(found_inf=found_inf)
        lr = traced.next_rate()
        traced.step_in_graph(torch.tensor(lr), found_inf)
        traced.count_update(lr)
        assert traced.lr == fused.lr
        for mine, reference in zip(traced_params, fused_params, strict=True):
            torch.testing.assert_close(mine.detach(), reference.detach(), rtol=1e-6, atol=1e-7)
        if skip:
            assert all(torch.equal(p.detach(), b) for p, b in zip(traced_params, before, strict=True))
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(traced.state[0][key], fused.state[0][key], rtol=1e-5, atol=1e-7)
    assert int(traced.state[0]["step"]) == 6  # seven updates, one skipped
