"""Interleaved rounds, medians and same-round ratios, and the cells of the tables.

The machine is shared and noisy, so no number stands alone: :func:`rounds` measures every
system once per round (the order rotated from round to round), divides each metric by the
reference's in the same round, and reports medians. It also records how busy the whole machine
was (``/proc/stat``) while each sample ran, since other processes can take the CPU a proxy needs.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

Sample = dict[str, float]
"""One measurement of one system: metric name → value."""

BUSY = "machine busy"
"""The metric every sample gets: CPUs the whole machine kept busy meanwhile (0 to nproc)."""


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Series:
    """One system's samples, one per round, and their ratios to the round's reference."""

    name: str
    samples: list[Sample] = field(default_factory=list)
    ratios: dict[str, list[float]] = field(default_factory=dict)

    def values(self, metric: str) -> list[float]:
        return [sample[metric] for sample in self.samples if metric in sample]

    def median(self, metric: str) -> float | None:
        values = self.values(metric)
        return statistics.median(values) if values else None

    def ratio(self, metric: str) -> float | None:
        """The median over rounds of this system's metric divided by the reference's."""
        values = self.ratios.get(metric)
        return statistics.median(values) if values else None


def _cpu_times() -> tuple[int, int]:
    """(all, idle) jiffies of the whole machine."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]  # idle + iowait


def busy_cpus(measure: Callable[[], Sample], cpus: int) -> Sample:
    """``measure()``, plus how many CPUs the machine kept busy while it ran."""
    total, idle = _cpu_times()
    sample = measure()
    total_after, idle_after = _cpu_times()
    elapsed = total_after - total
    if elapsed > 0:
        sample[BUSY] = cpus * (1 - (idle_after - idle) / elapsed)
    return sample


def rounds(
    systems: dict[str, Callable[[], Sample]], *, count: int, reference: str, cpus: int
) -> dict[str, Series]:
    """Measure every system once per round, the order rotated each round.

    Each metric of a sample is also divided by the same metric of ``reference`` in that round.
    """
    names = list(systems)
    series = {name: Series(name) for name in names}
    for number in range(count):
        shift = number % len(names)
        samples: dict[str, Sample] = {}
        for name in names[shift:] + names[:shift]:
            samples[name] = busy_cpus(systems[name], cpus)
            shown = ", ".join(f"{k} {v:,.1f}" for k, v in samples[name].items())
            say(f"  round {number + 1}/{count}: {name}: {shown}")
        for name, sample in samples.items():
            series[name].samples.append(sample)
            for metric, value in sample.items():
                base = samples[reference].get(metric)
                if base and metric != BUSY:
                    series[name].ratios.setdefault(metric, []).append(value / base)
    return series


def machine_busy(found: dict[str, Series]) -> str:
    values = [v for series in found.values() for v in series.values(BUSY)]
    if not values:
        return ""
    return f"machine busy during these samples: median {statistics.median(values):.1f} CPUs"


# -------------------------------------------------------------------------------------- cells


@dataclass
class Report:
    """The tables, and one verdict line per speed target."""

    lines: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        self.lines.append(line)

    def extend(self, lines: Iterable[str]) -> None:
        self.lines.extend(lines)

    def target(self, goal: str, found: str, *, met: bool) -> None:
        self.targets.append(f"- {'met' if met else 'MISSED'}: {goal}: {found}")


def row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def cell(value: float | None, fmt: str = ",.0f") -> str:
    return "-" if value is None else f"{value:{fmt}}"


def percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:.0f} %"


def spread(values: Sequence[float], fmt: str = ",.0f") -> str:
    return f"{min(values):{fmt}}..{max(values):{fmt}}" if values else "-"


def megabytes(size: float) -> str:
    return f"{size / 1e6:.0f} MB"


# -------------------------------------------------------------------------------------- sizes

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20}
_UNITS |= {"g": 1 << 30, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def parse_size(text: str) -> int:
    """``1GiB``, ``200MB``, ``64MiB``, ``4096`` → bytes (KiB/MiB/GiB binary, kB/MB/GB decimal)."""
    match = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", text.strip())
    if not match or match[2].lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 1GiB, 200MB or 4096")
    return int(match[1]) * _UNITS[match[2].lower()]


def human(size: int) -> str:
    """``1073741824`` → ``1 GiB``, ``200000000`` → ``200 MB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"
