"""The compiled update's GPU kernels, counted in the Triton code Inductor generates for it, on a
machine without a GPU; prints one JSON object.

    python scripts/count_gpu_kernels.py --runs small:4096,base:4096 --precisions fp32,bf16

Needs a CUDA build of torch (the PyPI wheel) and a C compiler; no GPU, no driver. The model, its
flat parameters, Adam and the batch are built as seq2seq-train builds them (TrainingParts, Update,
the epoch's first batch of Multi30k), on device "cuda" under torch's FakeTensorMode: tensors with
shapes, dtypes and devices but no memory. The update is then compiled as compile=true compiles it
(seq2seq/train/compiled_update.py: torch.compile of the whole update, Inductor's default mode), and
each graph's wrapper code is taken from Inductor's GraphLowering.codegen() as it would be loaded,
before any Triton kernel is compiled or launched; the compile stops there.

What makes torch believe in a GPU (nothing in it runs anything):
- scripts/fake_h100/cudart.c, preloaded: the CUDA runtime calls torch makes while it traces (the
  current device and stream, the device's properties: an H100 SXM, sm_90, 132 SMs, 80 GB);
- scripts/fake_h100/libcuda.c as libcuda.so.1: c10 opens the driver library and asks whether a
  device has a primary context;
- Triton's active driver replaced by one that names the target (cuda, sm_90, warp 32) and nothing else;
- two Inductor passes that compute real values at compile time, on the device, given the CPU instead:
  the uniform-value constant folding (scalars) and the example tensors of the attention-pattern
  replacements (fuse_attention; the model calls SDPA itself, so those patterns have nothing to match).

Counted per update, in the generated `call()` of every graph compiled: the Triton kernels launched
(`<kernel>.run(` calls) and the extern calls (matrix products, attention, Inductor's fallbacks to
ATen: `extern_kernels.*(` and `torch.ops.*(`, less allocations and views, which launch nothing). The
eager operators around the compiled graph (the update's scalars, the read-back's stack) are not in
it; the CPU's figures (docs/performance.md, scripts/bench_train.py --counts-only) have them. With
--devices cuda,cpu the same update is also generated for the CPU and counted the same way (its C++
kernels and extern calls); --devices cpu alone runs on any torch, CPU builds included: the method
checked against the profiler's count of the same torch.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
FAKE_H100 = SCRIPTS / "fake_h100"
SHIM_MARK = "COUNT_GPU_KERNELS_SHIM"

# The CPU's profiled counts of the compiled update (scripts/bench_train.py --counts-only, torch 2.13.0,
# docs/performance.md): its generated kernels' profiler events, and the top-level `aten::` operators
# that compute, the graph's extern calls among them with the eager ones around the graph and the ones
# inside the CPU's mask operator. "randint": with the dropout mask a GPU traces (torch.randint), before
# the CPU's mask operator (seq2seq::keep_mask).
CPU_PROFILED = {
    ("small", "fp32"): [
        {"dropout": "keep_mask", "generated_kernels": 101, "extern_and_eager_calls": 193, "launches": 294},
        {"dropout": "randint", "generated_kernels": 90, "extern_and_eager_calls": 143, "launches": 233},
    ],
    ("small", "bf16"): [
        {"dropout": "keep_mask", "generated_kernels": 130, "extern_and_eager_calls": 193, "launches": 323},
    ],
    ("base", "fp32"): [
        {"dropout": "randint", "generated_kernels": 171, "extern_and_eager_calls": 260, "launches": 431},
    ],
}

# In a generated call(): a Triton kernel's launch, a C++ kernel's definition, and the calls that are
# not Inductor's kernels (`buf3 = torch.ops.aten._scaled_dot_product_efficient_attention.default(`,
# `extern_kernels.mm(`); of those, the ones that launch nothing (allocations, views) are left out.
TRITON_LAUNCH = re.compile(r"^\s*(\w+)\.run\(", re.MULTILINE)
CPP_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.cpp(?:_pybinding)?\(", re.MULTILINE)
EXTERN_CALL = re.compile(
    r"^\s*(?:[\w, ]+=\s*)?(extern_kernels\.(\w+)|torch\.ops\.\w+\.(\w+)(?:\.\w+)?)\(", re.MULTILINE
)
NOT_LAUNCHES = {"empty", "empty_strided", "as_strided", "view", "alias", "_reshape_alias", "reinterpret_tensor"}


def refuse_without_cuda_build(torch_version: str, cuda_version: str | None) -> str | None:
    """The one line the script exits with where torch cannot lower for CUDA (a CPU build), else None."""
    if cuda_version is None:
        return (
            f"needs a CUDA build of torch: this one is {torch_version} (pip install torch from PyPI into "
            "another venv; no GPU or driver is needed)"
        )
    return None


def call_body(source: str) -> str:
    """The body of the generated module's `call` (a function or the Runner's method): what runs
    each update, without the kernels' definitions and the benchmark harness after it."""
    match = re.search(r"^(\s*)def call\(self, args\):\n|^(\s*)def call\(args\):\n", source, re.MULTILINE)
    if match is None:
        raise ValueError("no call() in the generated code")
    indent = len(match.group(1) if match.group(1) is not None else match.group(2))
    lines = []
    for line in source[match.end() :].splitlines():
        stripped = line.strip()
        if stripped and len(line) - len(line.lstrip()) <= indent:
            break
        lines.append(line)
    return "\n".join(lines)


def count_launches(source: str) -> dict[str, object]:
    """A generated module's launches per call: Triton kernels (`.run(`), C++ kernels (calls of the
    names `async_compile.cpp` defined), extern calls (less allocations and views), by name."""
    body = call_body(source)
    triton = TRITON_LAUNCH.findall(body)
    cpp_names = set(CPP_KERNEL_DEF.findall(source))
    cpp = [name for name in re.findall(r"^\s*(\w+)\(", body, re.MULTILINE) if name in cpp_names]
    extern = [
        call for call, extern_op, aten_op in EXTERN_CALL.findall(body) if (extern_op or aten_op) not in NOT_LAUNCHES
    ]
    by_name: dict[str, int] = {}
    for name in extern:
        by_name[name] = by_name.get(name, 0) + 1
    return {
        "triton_kernels": len(triton),
        "cpp_kernels": len(cpp),
        "extern_calls": len(extern),
        "extern_calls_by_name": dict(sorted(by_name.items())),
    }


def build_shim(out: Path) -> Path:
    """Compiles scripts/fake_h100/ into `out` (cudart.so, lib/libcuda.so.1) against the CUDA headers
    of the installed nvidia-cuda-runtime wheel (Triton's bundled ones for what that lacks)."""
    import importlib.util

    site = Path(importlib.util.find_spec("torch").origin).parents[1]  # type: ignore[union-attr,arg-type]
    includes = [p for p in (site / "nvidia/cu13/include", site / "nvidia/cuda_runtime/include") if p.is_dir()]
    includes.append(site / "triton/backends/nvidia/include")
    flags = [f"-I{p}" for p in includes]
    (out / "lib").mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O1", *flags, str(FAKE_H100 / "cudart.c"), "-o", str(out / "cudart.so")], check=True
    )
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            str(FAKE_H100 / "libcuda.c"),
            "-o",
            str(out / "lib/libcuda.so.1"),
            "-Wl,-soname,libcuda.so.1",
        ],
        check=True,
    )
    return out


def relaunch_with_shim() -> None:
    """Runs this script again with the fake runtime preloaded (the loader reads LD_PRELOAD only at a
    process's start), in a fresh Inductor cache: a cached graph would skip the code generation."""
    out = Path(tempfile.mkdtemp(prefix="count_gpu_kernels-"))
    build_shim(out)
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(p for p in (str(out / "cudart.so"), env.get("LD_PRELOAD", "")) if p)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(out / "lib"), env.get("LD_LIBRARY_PATH", "")) if p)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(out / "inductor")
    env["TRITON_CACHE_DIR"] = str(out / "triton")
    env[SHIM_MARK] = str(out)
    os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)


class Captured(Exception):
    """Raised where Inductor would load its generated module: the code is taken, nothing compiled."""


def pretend_the_gpu_is_there() -> None:
    """The Python side of the fake H100 (the module docstring)."""
    import torch
    from torch._inductor.fx_passes import fuse_attention, joint_graph
    from torch.utils._python_dispatch import TorchDispatchMode
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    class H100Target:
        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", 90, 32)

        def get_current_device(self) -> int:
            return 0

        def get_active_torch_device(self) -> torch.device:
            return torch.device("cuda", 0)

        def get_device_interface(self) -> object:
            return torch.cuda

    driver.set_active(H100Target())

    class DeviceValuesOnCpu(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001,ANN204
            kwargs = dict(kwargs or {})
            if "device" in kwargs and torch.device(kwargs["device"]).type == "cuda":
                kwargs["device"] = torch.device("cpu")
            return func(*args, **kwargs)

    fold = joint_graph.UniformValueConstantFolder.run

    def fold_on_cpu(self, *args, **kwargs):  # noqa: ANN001,ANN002,ANN003,ANN202
        with DeviceValuesOnCpu():
            return fold(self, *args, **kwargs)

    joint_graph.UniformValueConstantFolder.run = fold_on_cpu
    sfdp_init = fuse_attention._sfdp_init
    fuse_attention._sfdp_init = lambda input_device=None: sfdp_init(torch.device("cpu"))


def capture_generated_code(generated: list[dict]) -> None:
    """Every graph's wrapper code into `generated`, where Inductor would load it as a module; the
    compile stops there, and the graph runs as Dynamo traced it."""
    import torch
    from torch._inductor.graph import GraphLowering

    def capture(self: GraphLowering) -> None:
        code = self.codegen_with_cpp_wrapper() if self.cpp_wrapper else self.codegen()
        source = code[0].value if hasattr(code[0], "value") else code[0]
        generated.append({"source": source, "device_types": sorted(self.device_types)})
        raise Captured()

    GraphLowering.compile_to_module = capture

    import torch._inductor.compile_fx as compile_fx_module

    compile_fx = compile_fx_module.compile_fx

    def compile_then_trace_on(gm, example_inputs, *args, **kwargs):  # noqa: ANN001,ANN002,ANN003,ANN202
        """Inductor as Dynamo's backend, up to its generated code; the graph then runs as traced (on
        the fake tensors), so a graph after a break is compiled and counted too."""
        before = len(generated)
        try:
            return compile_fx(gm, example_inputs, *args, **kwargs)
        except Exception:
            if len(generated) == before:
                raise
        print(f"count_gpu_kernels: graph {len(generated)} generated", file=sys.stderr, flush=True)

        def run_traced(*args):  # noqa: ANN002,ANN202
            with torch._guards.detect_fake_mode(args):  # the caller's fake tensors' mode
                return gm.forward(*args)

        return run_traced

    compile_fx_module.compile_fx = compile_then_trace_on


def generate(
    model: str, tokens: int, precision: str, device_name: str, data_dir: str, vocab: int, generated: list[dict]
) -> dict:
    """The update of `model` at `tokens` a batch compiled for `device_name` (the graphs' code lands in
    `generated`, capture_generated_code's); -> its launches, summed over its graphs."""
    import torch
    import torch._dynamo
    from hydra import compose, initialize_config_module
    from torch._subclasses.fake_tensor import FakeTensorMode

    import seq2seq.cli.train  # noqa: F401  (registers the config schema)
    from seq2seq.data.batching import Batch
    from seq2seq.data.pipeline import prepare_data
    from seq2seq.data.tokenizer import PAD_ID
    from seq2seq.model.transformer import build_model
    from seq2seq.train.distributed import DistContext
    from seq2seq.train.freezing import freeze
    from seq2seq.train.parts import TrainingParts
    from seq2seq.train.update import Update, training_batches

    overrides = [
        f"model={model}",
        "data=multi30k",
        f"data.dir={data_dir}",
        f"data.vocab_size={vocab}",
        f"batch_tokens={tokens}",
        "compile=true",
        f"precision={precision}",
    ]
    with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
        cfg = compose("train", overrides=overrides)
    device = torch.device(device_name)
    torch.manual_seed(cfg.seed)
    data = prepare_data(cfg.data)
    parts = TrainingParts.of(cfg, device)
    # The epoch's first batch, as training makes it (on a GPU widths padded to 8), on the CPU
    stream = training_batches(parts.batches, data, torch.device("cpu"), DistContext())
    (cpu_batch,) = stream.next_update(1, 0, 1)
    torch._dynamo.reset()
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake, device:
        # update.training_model's model, made on the device: its .to(device) would swap fake
        # parameters for others, which the fake mode's references to them forbid
        tok = data.tokenizers
        net = build_model(parts.model.config, tok.src.get_vocab_size(), tok.tgt.get_vocab_size(), PAD_ID)
        freeze(net, list(parts.model.freeze), parts.model.trainable_top_layers)
        update = Update(parts.update, net, device, DistContext(), precision, lambda _step: 0.0)
        cb = cpu_batch.to(torch.device("cpu"))  # with its target positions, made on the host as training does
        batch = Batch(
            fake.from_tensor(cb.src).to(device),
            fake.from_tensor(cb.tgt_in).to(device),
            fake.from_tensor(cb.tgt_out).to(device),
            cb.indices,
            cb.src_tokens,
            cb.tgt_tokens,
            fake.from_tensor(cb.tgt_positions).to(device),
        )
        compiled = update.compiled
        scale, earlier, lr = (
            compiled._scalar(1.0 / cpu_batch.tgt_tokens),
            torch.zeros((), device=device),
            compiled._scalar(1e-4),
        )
    before = len(generated)
    start = time.perf_counter()
    compiled._call(compiled._last, batch, scale, earlier, lr)  # Dynamo fakes the fakes it is given
    seconds = time.perf_counter() - start
    graphs = [count_launches(g["source"]) | {"device_types": g["device_types"]} for g in generated[before:]]
    total = {key: sum(g[key] for g in graphs) for key in ("triton_kernels", "cpp_kernels", "extern_calls")}
    by_name: dict[str, int] = {}
    for g in graphs:
        for name, n in g["extern_calls_by_name"].items():
            by_name[name] = by_name.get(name, 0) + n
    kernels = total["triton_kernels"] if device.type == "cuda" else total["cpp_kernels"]
    return {
        "device": device_name,
        "batch_shape": [list(batch.src.shape), list(batch.tgt_in.shape)],
        "graphs_generated": len(graphs),
        "generated_kernels": kernels,
        "extern_calls": total["extern_calls"],
        "launches": kernels + total["extern_calls"],
        "extern_calls_by_name": dict(sorted(by_name.items())),
        "generate_seconds": round(seconds, 1),
        "sources": [g["source"] for g in generated[before:]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(SCRIPTS.parent / "data" / "multi30k"))
    parser.add_argument("--runs", default="small:4096,base:4096", help="model:batch_tokens, comma-separated")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument(
        "--devices",
        default="cuda",
        help="cuda, cpu or cuda,cpu: the devices to generate each update's code for (cpu needs no CUDA build)",
    )
    parser.add_argument(
        "--gpu-dropout-on-cpu",
        action="store_true",
        help="the CPU's graph with the GPU's traced dropout mask (torch.randint, not seq2seq::keep_mask): "
        "the same graph on both backends",
    )
    parser.add_argument("--code-dir", default="", help="write each graph's generated code here")
    args = parser.parse_args()
    import torch

    devices = args.devices.split(",")
    on_gpu = "cuda" in devices
    refusal = refuse_without_cuda_build(torch.__version__, torch.version.cuda) if on_gpu else None
    if refusal:
        sys.exit(refusal)
    if on_gpu and os.environ.get(SHIM_MARK) is None:
        relaunch_with_shim()
    if on_gpu:  # the relaunched process: the stand-ins and the fresh caches go when it ends
        atexit.register(shutil.rmtree, os.environ[SHIM_MARK], ignore_errors=True)
    import torch._inductor.config as inductor

    inductor.compile_threads = 1
    inductor.max_autotune = False
    inductor.max_autotune_gemm = False
    inductor.triton.autotune_pointwise = False
    inductor.triton.cudagraphs = False
    inductor.fx_graph_cache = False
    inductor.autotune_local_cache = False
    torch.set_num_threads(1)
    if on_gpu:
        pretend_the_gpu_is_there()
    if args.gpu_dropout_on_cpu:
        from seq2seq.model import dropout

        def randint_mask(x: torch.Tensor, threshold: int) -> torch.Tensor:  # dropout.traced_keep_mask off a CPU
            return torch.randint(0, dropout.INT16_LEVELS, x.shape, device=x.device) >= threshold

        dropout.traced_keep_mask = randint_mask
    generated: list[dict] = []
    capture_generated_code(generated)
    rows = []
    for item in args.runs.split(","):
        model, tokens = item.split(":")
        for precision in args.precisions.split(","):
            # The machine state each figure was taken in: counts do not depend on it, generate_seconds do.
            row: dict = {
                "model": model,
                "batch_tokens": int(tokens),
                "precision": precision,
                "load_average_1min_at_start": round(os.getloadavg()[0], 2),
            }
            for device in devices:
                counted = generate(model, int(tokens), precision, device, args.data_dir, args.vocab, generated)
                sources = counted.pop("sources")
                if args.code_dir:
                    for i, source in enumerate(sources):
                        path = Path(args.code_dir) / f"{model}_{tokens}_{precision}_{device}_{i}.py"
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_text(source)
                row["gpu_codegen" if device == "cuda" else "cpu_codegen"] = counted
            profiled = CPU_PROFILED.get((model, precision))
            if profiled and int(tokens) == 4096:
                row["cpu_profiled"] = profiled
            if args.gpu_dropout_on_cpu and "cpu_codegen" in row:
                row["cpu_codegen"]["dropout"] = "randint"
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    report = {
        "what": "the compiled update's kernels in the code Inductor generates for each device (cuda: on a machine "
        "without one), counted in the generated call()",
        "how": "the model, Adam and the batch under FakeTensorMode; torch.compile of the update as compile=true; "
        "Inductor's GraphLowering.codegen() taken before any kernel is compiled"
        + (", with a stand-in CUDA runtime and Triton target (H100, sm_90): nothing ran on a GPU" if on_gpu else ""),
        "command": "python scripts/count_gpu_kernels.py " + " ".join(sys.argv[1:]),
        "torch": torch.__version__,
        **(
            {"triton": __import__("triton").__version__, "gpu_pretended": torch.cuda.get_device_name(0)}
            if on_gpu
            else {}
        ),
        "runs": rows,
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
