"""What the CPUs drew over the timed part: every RAPL package's energy counter
(powercap) and the slot CPUs' current frequency (cpufreq) at each timed
sample; the row's energy, power, joules per token and frequency columns.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from omni.measure.procfs import rapl_packages, read_cur_freq_khz, read_energy_uj
from omni.measure.sampler import Found, Moment, RunView, Source, Tree


@dataclass(frozen=True)
class PowerSample:
    """Each RAPL package's energy counter (uJ, wrapping) and the sampled
    CPUs' frequency (kHz) at one moment of the timed part."""

    t: float
    energy_uj: dict[str, int] = field(default_factory=dict)
    freq_khz: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Power:
    """The packages' energy and the slot CPUs' frequency over the timed part."""

    window_s: float | None
    energy_j: float | None  # every RAPL package's, None where none is readable
    freq_mhz: float | None  # mean over the slot CPUs and samples; None without cpufreq
    freq_min_mhz: float | None


def _energy_j(first: PowerSample, last: PowerSample, wraps: dict[str, int]) -> float | None:
    """Joules between two samples over the packages both read; a counter that
    went down wrapped once (at its max_energy_range_uj)."""
    names = set(first.energy_uj) & set(last.energy_uj)
    if not names:
        return None
    total = 0
    for name in names:
        delta = last.energy_uj[name] - first.energy_uj[name]
        total += delta if delta >= 0 else delta + wraps.get(name, 0)
    return total / 1e6


def summarize_power(samples: list[PowerSample], cpus: tuple[int, ...], wraps: dict[str, int] | None = None) -> Power:
    """:class:`Power` over ``samples`` on ``cpus``; ``None`` figures with
    fewer than two samples or no time between them."""
    cpus = tuple(sorted(set(cpus)))
    if len(samples) < 2 or samples[-1].t <= samples[0].t or not cpus:
        return Power(None, None, None, None)
    first, last = samples[0], samples[-1]
    freqs = [f / 1000 for s in samples for c, f in s.freq_khz.items() if c in cpus]
    return Power(
        window_s=last.t - first.t,
        energy_j=_energy_j(first, last, wraps or {}),
        freq_mhz=statistics.mean(freqs) if freqs else None,
        freq_min_mhz=min(freqs) if freqs else None,
    )


class RaplSource(Source):
    """One :class:`PowerSample` a timed sample; ``cpus``: the slot's, whose frequency is read."""

    def __init__(self, cpus: tuple[int, ...] = ()) -> None:
        self.cpus = tuple(cpus)
        self.samples: list[PowerSample] = []
        self._rapl = rapl_packages()

    def wraps(self) -> dict[str, int]:
        """Where each RAPL package's energy counter wraps (uJ)."""
        return {d.name: d.max_uj for d in self._rapl}

    def timed(self, moment: Moment) -> None:
        self.samples.append(PowerSample(moment.t, read_energy_uj(self._rapl), read_cur_freq_khz(self.cpus)))

    def found(self, tree: Tree, run: RunView) -> Found:
        if not run.placed:
            return Found()
        found = summarize_power(self.samples, (*run.slot.cpus, *run.slot.siblings), self.wraps())
        power = found.energy_j / found.window_s if found.energy_j is not None and found.window_s else None
        row = run.row
        tokens = (row.get("batch_size") or 0) * (row.get("max_tokens") or 0)
        return Found(
            {
                "cpu_freq_mhz": found.freq_mhz,
                "cpu_freq_min_mhz": found.freq_min_mhz,
                "energy_j": found.energy_j,
                "power_w": power,
                "joules_per_token": power * row["e2e_s"] / tokens if power and row.get("e2e_s") and tokens else None,
            }
        )
