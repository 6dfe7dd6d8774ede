"""scripts/count_gpu_kernels.py: its count of a generated module's launches (on hand-written generated
code, Triton's and C++'s), and its one-line refusal where torch has no CUDA build (CI's torch)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from script_module import SCRIPTS, load_script

# The shape of Inductor's wrapper code (torch 2.14): kernels defined, then call() launching them, then
# the benchmark harness, whose own calls are not an update's.
TRITON_MODULE = '''
triton_poi_fused_add_0 = async_compile.triton('triton_poi_fused_add_0', """
@triton.jit
def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    tmp0.run(x)  # inside a kernel's source: not a launch
""")


class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def call(self, args):
        arg0_1, arg1_1, arg2_1 = args
        args.clear()
        s28 = arg2_1
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf0 = empty_strided_cuda((s28, 256), (256, 1), torch.float32)
            # Topologically Sorted Source Nodes: [linear], Original ATen: [aten.addmm]
            extern_kernels.mm(arg0_1, reinterpret_tensor(arg1_1, (256, 256), (1, 256), 0), out=buf0)
            assert_size_stride(buf0, (s28, 256), (256, 1), 'torch.ops.aten.mm.default')
            raw_stream0 = get_raw_stream(0)
            triton_poi_fused_add_0_xnumel = 256*s28
            triton_poi_fused_add_0.run(buf0, arg0_1, triton_poi_fused_add_0_xnumel, stream=raw_stream0)
            buf2 = torch.ops.aten._scaled_dot_product_efficient_attention.default(buf0, buf0, buf0, None, True)
            buf3 = buf2[0]
            buf4 = torch.ops.aten.empty.memory_format([4], dtype=torch.float32, device='cuda')
            # a comment naming triton_poi_fused_add_0.run( launches nothing
            triton_poi_fused_add_0.run(buf3, buf0, triton_poi_fused_add_0_xnumel, stream=raw_stream0)
            extern_kernels.addmm(arg1_1, buf3, buf0, alpha=1, beta=1, out=buf4)
        return (buf3, buf4, )


def benchmark_compiled_module(args, times=10, repeat=10):
    fn = lambda: call(list(args))
    triton_poi_fused_add_0.run(args)
    extern_kernels.mm(args)
'''

CPP_MODULE = '''
cpp_fused_add_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r"""
extern "C" void kernel(const float* in_ptr0, float* out_ptr0) { }
""")
cpp_fused_mul_1 = async_compile.cpp_pybinding(['const float*', 'float*'], r"""
extern "C" void kernel(const float* in_ptr0, float* out_ptr0) { }
""")


def call(args):
    arg0_1, = args
    args.clear()
    buf0 = empty_strided_cpu((4, 4), (4, 1), torch.float32)
    cpp_fused_add_0(arg0_1, buf0)
    extern_kernels.mm(buf0, buf0, out=buf0)
    cpp_fused_mul_1(buf0, buf0)
    cpp_fused_add_0(buf0, buf0)
    return (buf0, )


def benchmark_compiled_module(args, times=10, repeat=10):
    cpp_fused_add_0(args)
'''


def test_a_triton_module_counts_its_call_s_launches_and_extern_calls() -> None:
    counted = load_script("count_gpu_kernels").count_launches(TRITON_MODULE)
    assert counted == {
        "triton_kernels": 2,
        "cpp_kernels": 0,
        "extern_calls": 3,  # mm, attention, addmm; not the allocation, the views or the asserts
        "extern_calls_by_name": {
            "extern_kernels.addmm": 1,
            "extern_kernels.mm": 1,
            "torch.ops.aten._scaled_dot_product_efficient_attention.default": 1,
        },
    }


def test_a_cpp_module_counts_the_calls_of_the_kernels_it_defines() -> None:
    counted = load_script("count_gpu_kernels").count_launches(CPP_MODULE)
    assert (counted["cpp_kernels"], counted["triton_kernels"], counted["extern_calls"]) == (3, 0, 1)


def test_code_without_a_call_function_is_refused() -> None:
    with pytest.raises(ValueError, match="no call"):
        load_script("count_gpu_kernels").count_launches("x = 1\n")


def test_a_cpu_build_of_torch_is_refused_in_one_line() -> None:
    refuse = load_script("count_gpu_kernels").refuse_without_cuda_build
    assert refuse("2.13.0+cpu", None).startswith("needs a CUDA build of torch: this one is 2.13.0+cpu")
    assert refuse("2.14.1+cu130", "13.0") is None


@pytest.mark.skipif(torch.version.cuda is not None, reason="this torch is a CUDA build: the script would run")
def test_the_script_exits_with_that_line_on_this_torch() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "count_gpu_kernels.py"), "--runs", "small:4096"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"needs a CUDA build of torch: this one is {torch.__version__} (pip install torch from PyPI into another "
        "venv; no GPU or driver is needed)"
    ]
