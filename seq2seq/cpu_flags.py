"""What the CPU has, read from /proc/cpuinfo without importing torch: `seq2seq-translate` chooses its
engine before torch would load (`import torch` is 1-3 s of its start-up)."""

from __future__ import annotations

from pathlib import Path

# x86 names its bf16 instructions amx_bf16 and avx512_bf16; ARM's extension is "bf16" (its Features line).
BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16", "bf16"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's flags (x86 "flags", ARM "Features"); empty where there is no cpuinfo (macOS)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def has_bf16_instructions() -> bool:
    """True where precision=auto may compute in bf16 (seq2seq.precision measures it only there)."""
    return bool(cpu_flags() & BF16_FLAGS)
