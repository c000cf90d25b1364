"""What every benchmark prints besides its own figures: the machine it ran on, and each figure
beside a reference measured in the same run, as a ratio.

Our machines differ up to 3x in speed and are often shared, so an absolute figure says little
on another machine; a ratio to a reference that the same run measured a moment earlier (HTTP
against in-process, with against without the shim, ours against a baseline policy) travels.
The README quotes the ratios first, and absolute figures with the `machine:` line they came
with.
"""
from __future__ import annotations

import os
import platform


def machine() -> str:
    """One line naming the machine: CPU model, CPUs, load, OS and Python."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{model}, {os.cpu_count()} CPUs, load {load:.1f}, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")


def print_machine() -> None:
    """Prints the `machine:` line (first, so absolute figures below are tied to it)."""
    print(f"machine: {machine()}", flush=True)


def ratio(name: str, value: float, reference: float, what: str, reference_what: str,
          unit: str = "") -> float:
    """Prints a figure beside its same-run reference and their ratio (as `name_ratio=R` too,
    for scripts); returns the ratio."""
    if not reference:
        print(f"{name}: {value:.4g}{unit} {what} vs 0 {reference_what}: no ratio", flush=True)
        return float("nan")
    r = value / reference
    print(f"{name}: {value:.4g}{unit} {what} vs {reference:.4g}{unit} {reference_what} "
          f"(same run): {r:.3g}x", flush=True)
    print(f"{name}_ratio={r:.4g}", flush=True)
    return r
