"""``omni reproduce``: rerun a stored result from its own record and say,
per metric, whether the new runs agree with it.

The target (a sweep id, a run id, a results file, a summary) is read as
rows; the rows carry what a rerun needs (the spec's text, the env's
declaration and key, the model's recipe and digest, the host's facts),
and a sweep in a results store also has its manifest (spec copy, passes,
slots). The rerun is an ordinary sweep of the same spec, seed, slots and
passes, its rows linked to the target (``reproduces``). Each arm's metric
is then judged new runs against recorded ones by the verdict code of
``omni compare`` (:func:`omni.history.compare.compare_sweeps`, the
between-sweep drift included, since the two were not interleaved):

- **reproduced**: equivalent within min_effect at the metric's level, or
  a difference shown to be smaller than min_effect;
- **not reproduced**: better or worse beyond min_effect, with the ratio
  (new over recorded), its interval and the direction;
- **undecided**: anything else, with the passes that would decide or the
  reason no verdict was given.

Nothing is rerun across a difference of hardware (CPU model, ISA flags,
NUMA layout) unless asked: such a rerun measures the hardware too.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from omni.errors import OmniError
from omni.history.hardware import recorded
from omni.report.units import ratio_interval
from omni.run.plan import SlotOverride
from omni.spec.envs import Declared, EnvSpec, requirement_name
from omni.stats.planning import rerun_runs_needed
from omni.store.layout import run_file_of, stored_run_ids
from omni.store.objstore import ResultsPath, results_root
from omni.store.reading import load_file, load_runs, rows_from_text
from omni.store.retract import SweepRows, covering, split_rows

FLAG = "--across-hardware"
NAME_MAX = 255  # a file name's bytes: an id longer is no folder under runs/


@dataclass
class Target:
    """What is reproduced: every row it holds (retracted ones too), and
    where they came from."""

    kind: str  # sweep | run | file | summary
    given: str
    sweep_id: str
    rows: pd.DataFrame
    store: ResultsPath | None = None  # the results it is in (None: a file read alone)
    manifest: dict | None = None
    spec_text: str | None = None
    spec_suffix: str = ".yaml"
    retracted: list[str] = field(default_factory=list)  # "N run(s): reason (superseded by X)"

    @property
    def arms(self) -> list[str]:
        return list(dict.fromkeys(self.rows.sort_values("order_index")["arm"]))

    @property
    def passes(self) -> int:
        """The sweep's passes by its manifest, else the passes its rows show."""
        if self.manifest and self.manifest.get("passes"):
            return int(self.manifest["passes"])
        return int(self.rows["pass_index"].max()) + 1

    def require_spec(self) -> str:
        """The spec text the target ran, or a refusal naming what it lacks."""
        if self.spec_text is None:
            raise OmniError(
                f"{self.given}: no spec to rerun: the rows predate schema 18 (no spec_text) and no "
                "results/sweeps/<id>/ manifest is beside them; reproduce it from the results store it was written to"
            )
        return self.spec_text

    def sweep_rows(self) -> SweepRows:
        """The target's rows as a comparison reads them: timed and ok apart
        from the profiled passes (retracted ones kept: they are what is reproduced)."""
        rows = split_rows(self.rows)
        if rows.timed.empty:
            raise OmniError(f"{self.given}: every run is a profiled pass; nothing timed to reproduce")
        return rows


def read_target(given: str, results: str) -> Target:
    """A sweep id or run id in ``results``, or a file: a Parquet file of runs
    (a run file, a compacted part, any file of omni's rows) or a summary JSON."""
    if given.endswith(".parquet"):
        return _from_parquet(given)
    if given.endswith(".json"):
        return _from_summary(given)
    store = results_root(results)
    if not given or given.startswith(".") or "/" in given or "\0" in given or len(os.fsencode(given)) > NAME_MAX:
        raise OmniError(
            f"{given[:80]!r} is no sweep id or run id (ids are the folder names under {store / 'runs'}) "
            "and no .parquet or summary .json file"
        )
    if run_file_of(store, given):
        rows = load_runs(store)
        rows = rows[rows["run_id"] == given]
        return _in_store("run", given, rows, store)
    if stored_run_ids(store, given):
        return _in_store("sweep", given, load_runs(store, sweep_id=given), store)
    raise OmniError(
        f"{given!r} is no sweep id or run id under {store} and no .parquet or summary .json file; "
        f"list sweeps with ls {store / 'runs'}, or give the results a file came from with --results"
    )


def _from_parquet(given: str) -> Target:
    path = results_root(given)
    if not path.exists():
        raise OmniError(f"{given}: no such file; give a Parquet file of omni's rows, a sweep id or a run id")
    return _from_rows("file", given, load_file(path))


def _from_rows(kind: str, given: str, rows: pd.DataFrame) -> Target:
    """A target read from a file alone: its rows carry the spec text."""
    if rows.empty:
        raise OmniError(f"{given} holds no rows")
    sweeps = sorted(set(rows["sweep_id"]))
    if len(sweeps) != 1:
        raise OmniError(f"{given} holds rows of {len(sweeps)} sweeps ({', '.join(sweeps[:4])}): give one sweep's file")
    target = Target(kind, given, sweeps[0], rows)
    _spec_from_rows(target)
    return target


def _from_summary(given: str) -> Target:
    """A summary JSON: the rows it carries (``omni summary`` embeds them), or
    for a summary written without them, the results store it sits in."""
    path = results_root(given)
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise OmniError(f"{given}: cannot read it as a summary JSON ({err})") from None
    if not isinstance(summary, dict):
        raise OmniError(f"{given}: not a summary JSON (an object with sweep_id and rows_parquet_base64)")
    if isinstance(summary.get("rows_parquet_base64"), str):
        target = _from_rows("summary", given, rows_from_text(summary["rows_parquet_base64"], given))
        target.retracted = [_retraction(r) for r in summary.get("retractions") or []]
        return target
    sweep_id = summary.get("sweep_id")
    store = path.parent.parent
    if not sweep_id or not stored_run_ids(store, sweep_id):
        raise OmniError(
            f"{given}: this summary carries no rows (written by an omni before summaries embedded them) and no "
            f"results store beside it holds sweep {sweep_id or '?'}'s rows: rerun `omni summary {sweep_id or 'SWEEP'}` "
            "where its results are, or reproduce the sweep's Parquet file (results/compacted/sweep=<id>/part-0000.parquet)"
        )
    return _in_store("summary", given, load_runs(store, sweep_id=sweep_id), store)


def _in_store(kind: str, given: str, rows: pd.DataFrame, store: ResultsPath) -> Target:
    sweep_id = str(rows["sweep_id"].iloc[0])
    target = Target(kind, given, sweep_id, rows, store)
    folder = store / "sweeps" / sweep_id
    manifest_path = folder / "manifest.json"
    if manifest_path.exists():
        target.manifest = json.loads(manifest_path.read_text())
        copy = folder / target.manifest["spec_copy"]
        target.spec_text, target.spec_suffix = copy.read_text(), Path(copy.name).suffix
    else:
        _spec_from_rows(target)
    target.retracted = [_retraction(r) for r in covering(store, rows["run_id"])]
    return target


def _retraction(found: dict) -> str:
    """One retraction covering the target (:func:`omni.store.retract.covering`), as the plan names it."""
    superseded = f" (superseded by {found['superseded_by']})" if found.get("superseded_by") else ""
    return f"{len(found['run_ids'])} run(s) retracted: {found['reason']}{superseded}"


def _spec_from_rows(target: Target) -> None:
    texts = {t for t in target.rows.get("spec_text", pd.Series(dtype=object)).dropna()}
    if len(texts) > 1:
        raise OmniError(f"{target.given}: its rows hold {len(texts)} different spec texts; one sweep has one")
    if texts:
        target.spec_text = texts.pop()
        target.spec_suffix = Path(str(target.rows["spec_path"].dropna().iloc[0])).suffix or ".yaml"


# --- the host ---


@dataclass(frozen=True)
class HostDifference:
    fact: str
    recorded: str
    here: str
    hardware: bool  # a difference of hardware refuses the rerun (FLAG runs it anyway)

    def describe(self) -> str:
        return f"{self.fact}: {self.recorded} -> {self.here}"


def host_facts(rows: pd.DataFrame) -> dict[str, str]:
    """The host facts a set of rows recorded, each as one text (values
    several rows disagree on are listed together)."""
    facts: dict[str, str] = {}

    def distinct(column: str, value=str) -> None:
        if column in rows:
            seen = sorted({value(v) for v in rows[column] if recorded(v)})
            if seen:
                facts[column] = " | ".join(seen)

    distinct("cpu_model")
    distinct("cpu_flags", lambda v: " ".join(sorted(v)))
    distinct("numa_nodes", lambda v: str(int(v)))
    distinct("numa_topology", _cpus_per_node)
    distinct("kernel")
    distinct("hostname")
    if "host_conditions" in rows:
        conditions = [json.loads(v) if isinstance(v, str) else v for v in rows["host_conditions"] if recorded(v)]
        for key in sorted({k for c in conditions for k in c}):
            facts[f"condition {key}"] = " | ".join(sorted({str(c.get(key)) for c in conditions}))
    return facts


HARDWARE_FACTS = ("cpu_model", "cpu_flags", "numa_nodes", "numa_topology")


def _cpus_per_node(topology) -> str:
    nodes = json.loads(topology) if isinstance(topology, str) else topology
    return ", ".join(f"node {n}: {len(cpus)} CPUs" for n, cpus in sorted(nodes.items(), key=lambda kv: int(kv[0])))


def host_differences(recorded: dict[str, str], here: dict[str, str]) -> list[HostDifference]:
    """Each fact both sides know and that differs; hardware first."""
    found = [
        HostDifference(fact, recorded[fact], here[fact], fact in HARDWARE_FACTS)
        for fact in recorded
        if fact in here and recorded[fact] != here[fact]
    ]
    return sorted(found, key=lambda d: not d.hardware)


def this_host(sysfs_root: str = "/") -> dict[str, str]:
    """This host's facts, as a row of a sweep run here would record them."""
    from omni.host.conditions import host_conditions
    from omni.host.provenance import collect_host_provenance

    meta = collect_host_provenance(root=sysfs_root)
    meta["host_conditions"] = json.dumps(host_conditions())
    return host_facts(pd.DataFrame([meta]))


# --- the env and the model ---


@dataclass(frozen=True)
class EnvChoice:
    """The env a recorded env is rerun in: ``name`` as the spec names it
    (``declaration`` set: declared anew in the rerun's spec), and why."""

    recorded: str
    name: str
    how: str
    declaration: dict | None = None


def choose_envs(rows: pd.DataFrame, declared: Declared) -> dict[str, EnvChoice]:
    """For each env the rows ran in: the same declaration here (by key, or
    by the recorded declaration or pins where the key counts the build
    host), or the recorded declaration declared anew; else a refusal."""
    choices = {}
    for name, group in rows.dropna(subset=["engine_env"]).groupby("engine_env"):
        keys = set(group["engine_env_key"].dropna())
        decls = set(group.get("engine_env_declaration", pd.Series(dtype=object)).dropna())
        pins = set(group.get("engine_env_pins", pd.Series(dtype=object)).dropna())
        recorded = EnvSpec(**_env_fields(json.loads(decls.pop()))) if decls else None
        here = declared.envs.get(name)
        by_key = [n for n, s in declared.envs.items() if s.key() in keys]
        if here is not None and here.key() in keys:
            choices[name] = EnvChoice(name, name, f"{name}, the same declaration (key {here.key()})")
        elif by_key:
            choices[name] = EnvChoice(name, by_key[0], f"{by_key[0]}, declared with the recorded key {sorted(keys)[0]}")
        elif recorded is not None and here is not None and _same_but_build(recorded, here):
            choices[name] = EnvChoice(name, name, f"{name}, the recorded declaration but this host's build settings")
        elif recorded is not None:
            anew = f"{name}-{recorded.key()[:8]}"
            choices[name] = EnvChoice(name, anew, f"{anew}, the recorded declaration of {name}", recorded.declaration())
        elif here is not None and pins and _pins_match(here, pins):
            choices[name] = EnvChoice(name, name, f"{name}, whose pins match the recorded {sorted(pins)[0]}")
        else:
            now = f"declared here with key {here.key()}" if here else "not declared here"
            raise OmniError(
                f"env {name!r} of the target (key {', '.join(sorted(keys)) or 'unrecorded'}, pins "
                f"{', '.join(sorted(pins)) or 'unrecorded'}) is {now}, and its rows (schema before 18) hold no "
                f"declaration to build it from: declare it in envs.yaml as it was, then reproduce"
            )
    return choices


def _env_fields(decl: dict) -> dict:
    fields = dict(decl)
    for key in ("requirements", "remove", "tools", "tools_cmake"):
        if key in fields:
            fields[key] = tuple(fields[key])
    if isinstance(fields.get("source"), dict):
        from omni.spec.envs import SourceTree

        fields["source"] = SourceTree(**fields["source"])
    return fields


def _same_but_build(a: EnvSpec, b: EnvSpec) -> bool:
    da, db = a.declaration(), b.declaration()
    return {k: v for k, v in da.items() if k != "build_env"} == {k: v for k, v in db.items() if k != "build_env"}


def _pins_match(spec: EnvSpec, pins: set[str]) -> bool:
    wanted = {requirement_name(p.partition("==")[0]): p.partition("==")[2] for pin in pins for p in pin.split()}
    declared = {requirement_name(r.partition("==")[0]): r.partition("==")[2] for r in spec.requirements}
    return all(declared.get(name) == version for name, version in wanted.items() if name in declared)


def check_models(rows: pd.DataFrame, made: dict[str, tuple[str | None, str | None]]) -> list[str]:
    """Refusals: an arm whose model, had here (``made``: arm -> (digest,
    error)), is not the recorded one by digest."""
    problems = []
    for arm, group in rows.groupby("arm"):
        recorded = set(group["model_digest"].dropna())
        if not recorded or arm not in made:
            continue
        digest, error = made[arm]
        if error:
            problems.append(f"arm {arm!r}: its model cannot be had here: {error.splitlines()[0]}")
        elif digest not in recorded:
            problems.append(
                f"arm {arm!r}: the model made here has digest {str(digest)[:16]}, the target's runs "
                f"{sorted(recorded)[0][:16]}: not the same model, so nothing would be reproduced"
            )
    return problems


# --- the rerun's spec and request ---


def rerun_spec(target: Target, envs: dict[str, EnvChoice]) -> tuple[str, str, list[str]]:
    """(text, suffix, changes): the target's own spec text when it can run
    as it is, else the spec as JSON with the envs chosen and prompts files
    made absolute (its relative paths were its own folder's)."""
    data = yaml.safe_load(target.require_spec())
    base = (
        Path(str(target.rows["spec_path"].dropna().iloc[0])).parent if target.rows["spec_path"].notna().any() else None
    )
    changes = []
    renamed = {c.recorded: c for c in envs.values() if c.name != c.recorded}
    for arm in data.get("arms") or []:
        load = arm.get("load") or {}
        if base is not None and load.get("prompts") and not Path(load["prompts"]).is_absolute():
            load["prompts"] = str(base / load["prompts"])
            changes.append(f"arm {arm.get('name')}: prompts file {load['prompts']}")
        if arm.get("engine_env") in renamed:
            arm["engine_env"] = renamed[arm["engine_env"]].name
    if renamed:
        defaulted = [c for c in renamed.values() if c.recorded not in {a.get("engine_env") for a in data["arms"]}]
        if defaulted or "matrix" in data:
            names = ", ".join(sorted(renamed))
            raise OmniError(
                f"env(s) {names} must be rebuilt under another name, and the spec reaches them by default or "
                "through matrix:; declare them in envs.yaml as the target recorded them, then reproduce"
            )
        data["envs"] = dict(data.get("envs") or {})
        for choice in renamed.values():
            if choice.declaration is not None:
                data["envs"][choice.name] = choice.declaration
            changes.append(f"env {choice.recorded} -> {choice.how}")
    if not changes:
        return target.spec_text, target.spec_suffix, []
    return json.dumps(data, indent=1), ".json", changes


def slot_override(target: Target, hardware_differs: bool) -> SlotOverride | None:
    """The slots the target's sweep was given on the command line; none on
    other hardware (its CPUs are another host's)."""
    if hardware_differs:
        return None
    fields = (target.manifest or {}).get("slots_override")
    if fields:
        return SlotOverride(tuple(fields["cores"]), fields["node"], fields["straddle"])
    described = {d for d in target.rows.get("slots_override", pd.Series(dtype=object)).dropna() if d}
    if not described:
        return None
    words = described.pop().split()
    cores = tuple(words[i + 1] for i, w in enumerate(words) if w == "--cores")
    node = next((int(words[i + 1]) for i, w in enumerate(words) if w == "--node"), None)
    return SlotOverride(cores, node, "--straddle" in words)


# --- the answer ---


@dataclass(frozen=True)
class Outcome:
    arm: str
    metric: str
    verdict: str  # reproduced | not reproduced | undecided
    ratio: float | None  # new runs over recorded
    ci: tuple[float | None, float | None]
    runs: tuple[int | None, int | None]  # recorded, new
    why: str
    passes_needed: int | None = None


def outcomes(comparison) -> list[Outcome]:
    """Each (arm, metric) of a comparison (recorded = before, rerun = after)."""
    found = []
    for (arm, metric), judged in comparison.judged.items():
        comp = judged.comparison
        if comp is None:
            found.append(
                Outcome(arm, metric, "undecided", None, (None, None), (None, None), judged.refused or "no verdict")
            )
            continue
        ratio, ci, runs = comp.ratio, (comp.ci_low, comp.ci_high), (comp.n_base, comp.n_other)
        effect = f"min_effect {comp.min_effect:.0%}"
        if comp.verdict == "equivalent":
            found.append(Outcome(arm, metric, "reproduced", ratio, ci, runs, f"equivalent within {effect}"))
        elif comp.verdict in ("better", "worse") and comp.below_min_effect:
            found.append(Outcome(arm, metric, "reproduced", ratio, ci, runs, f"differs, by less than {effect}"))
        elif comp.verdict in ("better", "worse"):
            direction = "higher" if ratio > 1 else "lower"
            why = f"the rerun is {direction} ({comp.verdict}) beyond {effect}"
            found.append(Outcome(arm, metric, "not reproduced", ratio, ci, runs, why))
        else:
            needed, reach = _rerun_reach(comp, effect)
            found.append(Outcome(arm, metric, "undecided", ratio, ci, runs, f"inconclusive: {reach}", needed))
    return found


def _rerun_reach(comp, effect: str) -> tuple[int | None, str]:
    """(passes of a rerun that would decide it, why): the recorded runs are
    fixed, so the rerun side alone grows (:func:`rerun_runs_needed`), not
    both as a sweep's "needs N passes" assumes."""
    if comp.unreachable:
        return None, f"the drift between sweeps (sd {comp.drift:.1%}) alone keeps it wider than {effect}"
    needed = rerun_runs_needed(
        comp.min_effect, comp.noise, comp.n_base, comp.confidence, drift=comp.drift, drift_df=comp.drift_df
    )
    if needed is None:
        return None, (
            f"the {comp.n_base} recorded runs (noise {comp.noise * 100:.2g} %) keep the interval wider than {effect} "
            "however long the rerun: only a target with more passes can be reproduced at this level"
        )
    return needed, f"a rerun of about {needed} passes (--passes {needed}) would decide it"


def describe_outcome(o: Outcome) -> str:
    ratio = f" x{o.ratio:.3f} {_interval(o.ci)}" if o.ratio and o.ci[0] is not None else ""
    runs = f", {o.runs[0]} recorded v {o.runs[1]} new run(s)" if o.runs[0] is not None else ""
    return f"{o.arm} {o.metric}: {o.verdict}{ratio} ({o.why}{runs})"


def _interval(ci) -> str:
    """As summaries show one (bounds past 1/1000 or 1000 as <0.001, >1000)."""
    return ratio_interval(ci[0], ci[1] if ci[1] is not None else math.inf)


def as_record(target: Target, new_sweep: str | None, differences, envs, changes, found, across: bool) -> dict[str, Any]:
    return {
        "target": target.given,
        "target_kind": target.kind,
        "reproduces": target.sweep_id,
        "sweep_id": new_sweep,
        "retracted": target.retracted,
        "across_hardware": across,
        "host_differences": [d.__dict__ for d in differences],
        "envs": {k: c.how for k, c in envs.items()},
        "spec_changes": changes,
        "outcomes": [{**o.__dict__, "ci": list(o.ci), "runs": list(o.runs)} for o in found],
    }


def as_markdown(record: dict) -> str:
    lines = [f"# Reproduction of {record['reproduces']}", ""]
    lines += [f"Target: `{record['target']}` ({record['target_kind']}); rerun: sweep `{record['sweep_id']}`.", ""]
    lines += [f"**Retracted:** {r}" for r in record["retracted"]] + ([""] if record["retracted"] else [])
    hard = [d for d in record["host_differences"] if d["hardware"]]
    if hard and record["across_hardware"]:
        lines += [f"**Judged across hardware** ({FLAG}): each verdict measures the hardware's change too.", ""]
    if record["host_differences"]:
        lines += ["Host differences (recorded -> here):", ""]
        lines += [f"- {d['fact']}: {d['recorded']} -> {d['here']}" for d in record["host_differences"]] + [""]
    lines += [f"- the target's rows as read: `{record['target_copy']}`"] if record.get("target_copy") else []
    lines += [f"- env {k}: {v}" for k, v in record["envs"].items()]
    lines += [f"- spec: {c}" for c in record["spec_changes"]] + [""]
    lines += [
        "| arm | metric | verdict | rerun / recorded | interval | runs (recorded, new) | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in record["outcomes"]:
        ratio = f"x{o['ratio']:.3f}" if o["ratio"] else "—"
        ci = _interval(o["ci"]) if o["ci"][0] is not None else "—"
        runs = f"{o['runs'][0]}, {o['runs'][1]}" if o["runs"][0] is not None else "—"
        lines.append(f"| {o['arm']} | {o['metric']} | **{o['verdict']}** | {ratio} | {ci} | {runs} | {o['why']} |")
    return "\n".join(lines) + "\n"
