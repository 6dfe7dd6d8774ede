"""What the CPU is and has, read from /proc/cpuinfo without importing torch: `seq2seq-translate`
chooses its engine before torch would load (`import torch` is most of its start-up). The one place
that reads the file: the precision cache's key and the benchmarks' machine name use it too."""

from __future__ import annotations

import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# x86 names its bf16 instructions amx_bf16 and avx512_bf16; ARM's extension is "bf16" (its Features line).
BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16", "bf16"})


def _first_value(keys: tuple[str, ...], cpuinfo: Path) -> str | None:
    """The value of the first line whose key is one of `keys` (the first processor's); None without one."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:  # no /proc (macOS, Windows)
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            return value.strip()
    return None


def cpu_name(cpuinfo: Path = CPUINFO) -> str:
    """The CPU's model name, e.g. "Intel(R) Xeon(R) Processor"; the platform's name where cpuinfo has none."""
    return _first_value(("model name",), cpuinfo) or platform.processor() or platform.machine()


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The first processor's flags (x86 "flags", ARM "Features"); empty where there is no cpuinfo."""
    return frozenset((_first_value(("flags", "Features"), cpuinfo) or "").split())


def has_bf16(cpuinfo: Path = CPUINFO) -> bool:
    """Whether the CPU lists bf16 instructions, the one answer both choices read: precision=auto takes
    bf16 only here (seq2seq/precision.py; elsewhere PyTorch emulates it), so only here does engine=auto
    weigh PyTorch in bf16 against the fp32 CTranslate2 export (seq2seq/inference/choice.py). No
    cpuinfo (macOS, Windows): no."""
    return bool(cpu_flags(cpuinfo) & BF16_FLAGS)
