"""``omni bisect``: the first engine version whose metric differs from the
first version's by more than ``min_effect``, as ``asv find`` does for Python
projects, with omni's verdicts.

Every probe is a sweep of its own: the first version (the reference) and the
probed one as two arms, interleaved on the same slots, with the A/A control
and ``passes: auto`` (the sequential rule runs pass after pass until the
metric's verdict is conclusive, or ``max_passes``). A probe is

- ``changed``: the verdict is better or worse, and not below min_effect;
- ``same``: equivalent, or a real difference smaller than min_effect;
- ``undecided``: anything else, or an A/A control that differed (the host
  moved during the probe, so its verdict is not trusted).

The last version is probed first: unchanged, there is nothing to find.
Then the range is halved; the answer is the first version of the last
bracket (same, changed). An undecided probe stops the search with the
bracket it had: omni does not guess. Every probe's rows stay in the
results store, its sweep named in the path printed.

A version is an engine env: a release of the arm's env's package (derived
from its declaration, pinned at each release), a commit of its llama.cpp
source tree, or envs named one by one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from omni.errors import OmniError
from omni.spec import LoadedSpec
from omni.spec.envs import Declared

Outcome = Literal["changed", "same", "undecided"]
DEFAULT_MAX_PASSES = 10


@dataclass(frozen=True)
class Version:
    label: str  # a release (0.29.0), a short commit, or an env's name
    env: str  # the engine env it runs in
    declaration: dict | None = None  # a derived env's declaration (the probe spec's envs: block)


@dataclass
class Probe:
    index: int
    version: str
    sweep_id: str | None
    outcome: Outcome
    ratio: float | None = None
    ci: tuple[float | None, float | None] = (None, None)
    runs: int | None = None  # of the probed version
    why: str = ""


@dataclass
class Search:
    """The state of a bisection over ``n`` versions: ``same`` and ``changed``
    are the indices known to be so (0 is the reference, same by definition)."""

    n: int
    good: int = 0
    bad: int | None = None
    probes: list[Probe] = field(default_factory=list)
    stopped: str | None = None

    def next_index(self) -> int | None:
        """The next version to probe, None when the search is over."""
        if self.stopped:
            return None
        if self.bad is None:
            return self.n - 1 if not self.probes else None
        return (self.good + self.bad) // 2 if self.bad - self.good > 1 else None

    def record(self, probe: Probe) -> None:
        self.probes.append(probe)
        if probe.outcome == "undecided":
            self.stopped = f"version {probe.version} could not be told apart: {probe.why}"
        elif probe.outcome == "changed":
            self.bad = probe.index
        elif self.bad is None:
            self.stopped = "the last version does not differ from the first: nothing to find in this range"
        else:
            self.good = probe.index

    @property
    def found(self) -> int | None:
        """The first changed version, once the bracket is one step wide."""
        return self.bad if self.bad is not None and self.bad - self.good == 1 and not self.stopped else None


def classify(judged, control_judged, untrusted: bool = False) -> tuple[Outcome, str]:
    """A probe's outcome from its metric's verdict (omni.report.verdicts.Judged),
    the A/A control's on the same metric, and whether the summary lets the
    control overrule the verdict (omni.stats.controls.untrusted: also a
    "same" the control's smaller difference could have made)."""
    if control_judged is not None and control_judged.comparison is not None:
        c = control_judged.comparison
        if untrusted or (c.verdict in ("better", "worse") and not c.below_min_effect):
            return "undecided", f"the A/A control differed ({c.verdict}, x{c.ratio:.3f}): the host moved"
    if judged is None or judged.comparison is None:
        return "undecided", (judged.refused if judged else None) or "no verdict"
    comp = judged.comparison
    if comp.verdict in ("better", "worse"):
        if comp.below_min_effect:
            return "same", f"{comp.verdict} but within min_effect {comp.min_effect:.0%}"
        return "changed", f"{comp.verdict}"
    if comp.verdict == "equivalent":
        return "same", f"equivalent within {comp.min_effect:.0%}"
    needed = f"; about {comp.passes_needed} passes per arm would resolve it" if comp.passes_needed else ""
    return "undecided", f"inconclusive after {comp.n_other} runs{needed}"


# --- the versions ---


def release_versions(declared: Declared, base_env: str, package: str, releases: list[str]) -> list[Version]:
    """One env per release, the base env's declaration pinned at it; an env
    envs.yaml already declares exactly so is used by its own name."""
    base = declared.spec(base_env)
    versions = []
    for release in releases:
        spec = base.pinned(package, release)
        same = [n for n, s in declared.envs.items() if s.key() == spec.key() and not s.newest]
        if same:
            versions.append(Version(release, same[0]))
        else:
            versions.append(Version(release, f"bisect-{package}-{release}", spec.declaration()))
    return versions


def require_range(versions: list[Version]) -> None:
    """A bisect needs two versions or more, the first the reference."""
    if len(versions) < 2:
        raise OmniError(
            f"the range holds {len(versions)} version(s): a bisect needs two or more, the first the reference"
        )


def commit_versions(declared: Declared, base_env: str, commits: list[str]) -> list[Version]:
    base = declared.spec(base_env)
    return [Version(c[:10], f"bisect-{base_env}-{c[:10]}", base.at_commit(c).declaration()) for c in commits]


# --- the probes ---


def probe_spec(loaded: LoadedSpec, arm_name: str, metric: str, ref: Version, probe: Version, max_passes: int) -> dict:
    """The sweep of one probe, as data: the spec's settings, its arm at the
    reference version and at the probed one, the A/A control, passes: auto."""
    sweep = loaded.sweep
    arms = {a.name: a for a in sweep.arms}
    if arm_name not in arms:
        raise OmniError(f"no arm of {loaded.path} is named {arm_name!r}; its arms: {', '.join(arms)}")
    arm = arms[arm_name].model_dump(mode="json", exclude_unset=True)
    prompts = (arm.get("load") or {}).get("prompts")
    if prompts and not Path(prompts).is_absolute():  # the probe's spec is written elsewhere: the file stays put
        arm["load"] = {**arm["load"], "prompts": str(loaded.path.parent / prompts)}
    settings = sweep.model_dump(
        mode="json",
        exclude_unset=True,
        exclude={"name", "arms", "baseline", "control", "passes", "max_passes", "budget", "primary_metrics", "envs"},
    )
    envs = {n: d.model_dump(mode="json", exclude_unset=True) for n, d in sweep.envs.items()}
    envs |= {v.env: v.declaration for v in (ref, probe) if v.declaration is not None}
    first, at = f"first-{ref.label}", f"at-{probe.label}"
    return {
        **settings,
        "name": f"{sweep.name}-bisect",
        "description": f"omni bisect of {arm_name} on {metric}: {probe.label} against {ref.label}",
        "passes": "auto",
        "max_passes": max_passes,
        "baseline": first,
        "control": True,
        "primary_metrics": [metric],
        **({"envs": envs} if envs else {}),
        "arms": [{**arm, "name": first, "engine_env": ref.env}, {**arm, "name": at, "engine_env": probe.env}],
    }


def run_probe(spec: dict, work: Path, results: str, index: int, label: str, metric: str, force: bool) -> Probe:
    """Run one probe's sweep (without Prefect, pass by pass) and read its verdict."""
    from omni.report.summary import summarize_sweep
    from omni.sweep.execute import run_sweep_items
    from omni.sweep.prepare import prepare_sweep
    from omni.sweep.request import SweepRequest

    path = work / f"probe-{index:02d}-{label}.json"
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=1))
    prepared = prepare_sweep(SweepRequest(spec=path, results=results, force=force))
    run_sweep_items(prepared)
    try:
        summary = summarize_sweep(prepared.context.results_dir, prepared.sweep_id)
    except OmniError as err:  # no ok run to judge (an env that failed to build names itself in the rows)
        return Probe(index, label, prepared.sweep_id, "undecided", why=str(err).splitlines()[0])
    from omni.stats.controls import untrusted

    at = spec["arms"][1]["name"]
    judged = summary.judged.get((at, metric))
    control = summary.judged.get((summary.control, metric)) if summary.control else None
    outcome, why = classify(judged, control, untrusted(summary, at, metric))
    comp = judged.comparison if judged else None
    runs = comp.n_other if comp else None
    return Probe(
        index,
        label,
        prepared.sweep_id,
        outcome,
        comp.ratio if comp else None,
        (comp.ci_low, comp.ci_high) if comp else (None, None),
        runs,
        why,
    )


def bisect(
    loaded: LoadedSpec,
    arm_name: str,
    metric: str,
    versions: list[Version],
    results: str,
    work: Path,
    max_passes: int = DEFAULT_MAX_PASSES,
    force: bool = False,
    log=lambda line: None,
) -> Search:
    """Probe ``versions`` (oldest first) until the first changed one is
    bracketed to one step, or a probe cannot decide."""
    require_range(versions)
    search = Search(len(versions))
    while (index := search.next_index()) is not None:
        version = versions[index]
        log(f"probe {len(search.probes) + 1}: {version.label} (env {version.env}) against {versions[0].label}")
        spec = probe_spec(loaded, arm_name, metric, versions[0], version, max_passes)
        probe = run_probe(spec, work, results, index, version.label, metric, force)
        search.record(probe)
        log("  " + describe_probe(probe))
    return search


def describe_probe(probe: Probe) -> str:
    ratio = f"x{probe.ratio:.3f} [{probe.ci[0]:.3f}, {probe.ci[1]:.3f}]" if probe.ratio and probe.ci[0] else "no ratio"
    return f"{probe.version}: {probe.outcome} ({probe.why}); {ratio}, {probe.runs} run(s); sweep {probe.sweep_id}"


def describe(search: Search, versions: list[Version], metric: str) -> str:
    lines = [f"bisect of {metric} over {len(versions)} versions, {versions[0].label} .. {versions[-1].label}:"]
    lines += [f"  {i + 1}. {describe_probe(p)}" for i, p in enumerate(search.probes)]
    if search.found is not None:
        lines.append(
            f"first version that differs from {versions[0].label}: {versions[search.found].label} "
            f"({versions[search.good].label} does not)"
        )
    elif search.stopped:
        bracket = f"{versions[search.good].label} .. {versions[search.bad].label}" if search.bad is not None else ""
        lines.append(f"stopped: {search.stopped}" + (f"; the change lies in {bracket}" if bracket else ""))
    return "\n".join(lines)


def as_record(search: Search, versions: list[Version], metric: str, arm: str) -> dict[str, Any]:
    """What ``--json`` prints and the bisect's own record in the work directory holds."""
    return {
        "arm": arm,
        "metric": metric,
        "versions": [asdict(v) for v in versions],
        "probes": [asdict(p) for p in search.probes],
        "found": versions[search.found].label if search.found is not None else None,
        "stopped": search.stopped,
    }
