"""The projection + label-smoothed loss and its gradient, compiled by Inductor alone (no model), three
ways: the plain loss on the whole logits, the same in LOSS_CHUNKS fixed chunks each under activation
checkpointing (autograd recomputes a chunk's logits in the backward), and `compiled_loss`'s chunks with
the gradient made in the forward. Prints, per way, the generated kernels and extern calls of one call
and the host memory it held at once (scripts/step_profile.py: counts, they do not drift with load).

    python scripts/compiled_loss_counts.py --rows 4096 --vocab 8000 --width 256
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
import torch.utils.checkpoint
from torch._dynamo.utils import counters

from seq2seq.train.compiled_loss import LOSS_CHUNKS, chunked_smoothed_loss
from seq2seq.train.loss import label_smoothed_loss

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_profile import (  # noqa: E402
    count_generated_kernels,
    generated_kernel_names,
    operator_calls_per_update,
    peak_allocated_per_update,
)

SMOOTHING = 0.1


def plain(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return label_smoothed_loss(hidden @ weight.t(), target, SMOOTHING)


def checkpointed(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The plain loss of each of LOSS_CHUNKS row pieces (rows a multiple of LOSS_CHUNKS here), each piece
    checkpointed so that its logits are recomputed in the backward rather than kept."""
    loss = nll = 0
    for h, t in zip(hidden.chunk(LOSS_CHUNKS), target.chunk(LOSS_CHUNKS), strict=True):
        chunk_loss, chunk_nll = torch.utils.checkpoint.checkpoint(plain, h, weight, t, use_reentrant=False)
        loss, nll = loss + chunk_loss, nll + chunk_nll
    return loss, nll


def fixed_chunks(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return chunked_smoothed_loss(hidden, weight, target, SMOOTHING, torch.float32)


def with_gradients(loss_of):  # noqa: ANN001, ANN201
    """The loss and autograd.grad of it in one graph, as compile=true traces the update."""

    def step(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loss, nll = loss_of(hidden, weight, target)
        return loss.detach(), nll, *torch.autograd.grad(loss, (hidden, weight))

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ways", default="plain,checkpointed,fixed_chunks")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    count_generated_kernels()
    torch._dynamo.config.trace_autograd_ops = True
    hidden = torch.randn(args.rows, args.width, requires_grad=True)
    weight = (torch.randn(args.vocab, args.width) / args.width**0.5).requires_grad_()
    target = torch.randint(0, args.vocab, (args.rows,))
    report = {"rows": args.rows, "vocab": args.vocab, "width": args.width, "torch": torch.__version__}
    reference = None
    for name in args.ways.split(","):
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(with_gradients(globals()[name]))
        try:
            results = compiled(hidden, weight, target)
        except Exception as error:  # noqa: BLE001  (a way the compiler cannot take is a result too)
            report[name] = {"error": f"{type(error).__name__}: {error}"[:400]}
            continue
        reference = reference or results
        call = functools.partial(compiled, hidden, weight, target)
        counted = {
            "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            **operator_calls_per_update(call, 2),
            **peak_allocated_per_update(call, 2),
            "generated_kernels_by_name": generated_kernel_names(call),
        }
        counted["largest_difference_from_plain"] = max(
            float((a - b).abs().max()) for a, b in zip(results, reference, strict=True)
        )
        report[name] = counted
        print(json.dumps({name: counted}), file=sys.stderr, flush=True)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
