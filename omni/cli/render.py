"""What the ``omni`` command prints, as text.

Each renderer takes the data a command read and returns the text it shows;
the command prints it, and tests read it from canned data. Nothing here
reads files or starts anything. Tables are plain aligned columns that are
as wide as their values: a narrow terminal wraps a long line, it never cuts
a value short. Numbers are printed by :func:`omni.report.units.quantity`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from omni.cpulist import format_cpulist
from omni.host.topology import physical_cores
from omni.report.units import metric_quantity, number, quantity, ratio_interval

__all__ = ["number", "quantity"]  # the one formatter of numbers, for callers of render


def grid(header: Sequence[str], rows: Iterable[Sequence[str]], right: Iterable[int] = ()) -> str:
    """Columns as wide as their widest value, two spaces apart, a rule under
    the header; the columns numbered in ``right`` are right-aligned."""
    rows = [list(map(str, r)) for r in rows]
    right = set(right)
    widths = [max(len(r[i]) for r in [list(header), *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


# --- omni validate ---


def _fields_at_default(model) -> dict[str, bool]:
    """Field name -> whether its value is the model's default for it."""
    out = {}
    for name, info in type(model).model_fields.items():
        default = info.get_default(call_default_factory=True)
        out[name] = getattr(model, name) == default
    return out


def _plain(value: Any) -> str:
    """A field's value as a person reads it: ``a=1, b=x`` for a mapping (its
    unset keys left out), ``x, y`` for a list, ``none`` for an empty one."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_plain(v)}" for k, v in value.items() if v is not None) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(_plain(v) for v in value) or "none"
    if isinstance(value, float):
        return number(value, 6)
    return str(value)


def resolved_arm(arm, declared) -> dict[str, Any]:
    """The arm as it runs: its fields with omni's defaults filled in where the
    spec left them to omni (engine env, patches) and its identity hash."""
    from omni.envs.resources import env_name
    from omni.spec import arm_hash
    from omni.vllm_plugin.names import PATCHES

    fields = arm.model_dump(mode="json")
    fields["engine_env"] = env_name(arm, declared)
    fields["patches"] = list(PATCHES) if arm.patches == "all" else [] if arm.patches == "none" else arm.patches
    return {**fields, "hash": arm_hash(arm)}


def spec_envs(sweep):
    """The envs the sweep's arms can name: envs.yaml's and its own."""
    from omni import REPO_ROOT
    from omni.spec.envs import declared_envs

    return declared_envs(REPO_ROOT, sweep.envs)


# What an unset field means, where None alone would say nothing.
_UNSET = {
    "engine_env": "omni's own python",
    "model": "none",
    "dtype": "the engine's",
    "quantization": "none",
    "context_len": "the model's",
    "threads": "one per CPU of the slot",
    "kv_cache_bytes": "the engine's",
    "compile_mode": "the engine's (vLLM: eager)",
    "profile": "none",
    "description": "-",
    "baseline": "the first arm",
    "min_effect": "omni's per metric (omni summary names each)",
    "hosts": "this host",
    "control": "on with 2 arms or more and 3 passes or more",
}


def _key_values(pairs: Iterable[tuple[str, Any, bool]], indent: str) -> list[str]:
    """``key: value`` lines, ``(default)`` after a value the spec did not set."""
    pairs = list(pairs)
    width = max((len(k) for k, _, _ in pairs), default=0)
    lines = []
    for key, value, default in pairs:
        text = _UNSET.get(key, "-") if value is None else _plain(value)
        lines.append(f"{indent}{key + ':':<{width + 1}} {text}{' (default)' if default else ''}")
    return lines


def unbalanced(prepared) -> str | None:
    """A fixed pass count that leaves the slots unbalanced for the arms, as a warning (None: balanced)."""
    from omni.run.plan import rotation_balance

    if prepared.loaded.sweep.passes == "auto" or not prepared.slots:
        return None
    why = rotation_balance(prepared.passes, len(prepared.slots))
    return f"warning: {why}" if why else None


def _rotation(sweep) -> list[str]:
    """The slots' balance over the passes, where the spec fixes both (explicit cpulists or a slot count)."""
    from omni.run.plan import rotation_balance

    cpus = sweep.slots.cpus
    slots = len(cpus) if isinstance(cpus, list) else 1 if isinstance(cpus, str) else sweep.slots.count
    if sweep.passes == "auto" or not slots:
        return [] if sweep.passes == "auto" else [
            f"rotation: balanced when passes ({sweep.passes}) are a multiple of the host's slot count "
            "(omni sweep says so when they are not)"
        ]  # fmt: skip
    why = rotation_balance(sweep.passes, slots)
    return [f"warning: {why}" if why else f"rotation: {sweep.passes} passes balance over {slots} slot(s)"]


def arms(loaded) -> str:
    """``omni validate``: the sweep's settings, then one block per arm (matrix
    arms and the control included) with every field, its params, its patches,
    defaults resolved and marked."""
    sweep = loaded.sweep
    control = sweep.control_arm
    head = [
        f"{sweep.name}: {len(sweep.arms)} arm(s) x {sweep.passes} pass(es), baseline {sweep.baseline_arm}"
        + (f", A/A control {control}" if control else ", no A/A control"),
        f"spec {loaded.path}",
        f"sha256 {loaded.sha256}",
    ]
    head += _rotation(sweep)
    at_default = _fields_at_default(sweep)
    settings = [(k, getattr(sweep, k), at_default[k]) for k in type(sweep).model_fields if k not in ("name", "arms")]
    settings = [(k, v.model_dump() if hasattr(v, "model_dump") else v, d) for k, v, d in settings]
    lines = [*head, "", "settings:", *_key_values(settings, "  ")]
    declared = spec_envs(sweep)
    for arm in sweep.arms:
        role = " (baseline)" if arm.name == sweep.baseline_arm else ""
        role = f" (A/A control: a replica of {sweep.baseline_arm})" if arm.name == control else role
        resolved = resolved_arm(arm, declared)
        at_default = _fields_at_default(arm)
        at_default["patches"] = arm.patches == ("all" if arm.engine == "vllm" else "none")  # vLLM arms: all
        fields = [(k, resolved[k], at_default[k]) for k in type(arm).model_fields if k not in ("name", "params")]
        if arm.kv_cache_bytes:
            fields = [(k, f"{quantity(v, 'B')} ({v} bytes)" if k == "kv_cache_bytes" else v, d) for k, v, d in fields]
        param_defaults = type(arm.engine_params())().model_dump()
        params = [(k, v, param_defaults.get(k) == v) for k, v in arm.params.items()]
        lines += ["", f"arm {arm.name}{role}, hash {resolved['hash'][:12]}", *_key_values(fields, "  ")]
        lines += [f"  params ({arm.engine}):", *_key_values(params, "    ")]
    return "\n".join(lines)


def arms_json(loaded) -> str:
    """``omni validate --json``: the sweep's settings and its arms as they run."""
    sweep = loaded.sweep
    settings = sweep.model_dump(mode="json", exclude={"arms"})
    record = {
        **settings,
        "spec": str(loaded.path),
        "sha256": loaded.sha256,
        "baseline": sweep.baseline_arm,
        "control_arm": sweep.control_arm,
        "arms": [resolved_arm(arm, spec_envs(sweep)) for arm in sweep.arms],
    }
    return json.dumps(record, indent=2)


# --- omni sweep ---


def plan(prepared, rows: Sequence[Mapping]) -> str:
    """``omni sweep --dry-run``: the slots, then each run's order, placement
    and exact command line (rows: :func:`omni.sweep.prepare.describe_plan`)."""
    left = "" if len(rows) == prepared.planned else f" (of {prepared.planned}; the rest are stored)"
    lines = [
        f"sweep {prepared.sweep_id}: {len(rows)} run(s){left} on {len(prepared.slots)} slot(s) at once, "
        "nothing launched (--dry-run)"
    ]
    lines += [f"  {slot.describe()}" for slot in prepared.slots]
    if prepared.context.simulate_placement:
        lines.append("  (topology from a sysfs fixture: placement is planned, not applied)")
    for p in rows:
        lines.append(
            f"#{p['order']} wave {p['wave']} slot {p['slot']} {'profiled ' if p['profiled'] else ''}"
            f"pass {p['pass']} arm {p['arm']} run {p['run_id']} node {p['node']} cpus {format_cpulist(p['cpus'])} "
            f"membind {format_cpulist(p['membind'])} via {p['method']}"
        )
        if p["problem"]:
            lines.append(f"    will not run: {p['problem']}")
        env = " ".join(f"{k}={v}" for k, v in p["env"].items())
        lines.append(f"    {env} {p['command']}")
        lines += [f"    then, load generator: {c}" for c in p.get("client_commands") or []]
        if p.get("search"):
            lines.append(
                f"    then, the search's next levels (up to {p['search']} in all), each chosen from what it measured"
            )
    return "\n".join(lines)


def fleet_plan(prepared) -> str:
    """``omni sweep --dry-run`` of a fleet sweep: each host's runs."""
    fleet = prepared.fleet
    lines = [
        f"sweep {prepared.sweep_id}: {len(prepared.items)} run(s) of {prepared.planned} on hosts "
        f"{', '.join(fleet['hosts'])} ({fleet['mode']}), nothing launched (--dry-run)"
    ]
    items = {item.run_id: item for item in prepared.items}
    for shard in fleet["shards"]:
        instead = f" (host {shard['plan_host']}'s runs)" if shard["plan_host"] != shard["host"] else ""
        lines.append(f"host {shard['host']}{instead}: {len(shard['run_ids'])} run(s)")
        lines += [f"  pass {items[r].pass_index} arm {items[r].arm.name} run {r}" for r in shard["run_ids"]]
    return "\n".join(lines)


def arm_table(sweep_id: str, table, primary: Sequence[str] = (), void: Mapping[str, str] | None = None) -> str:
    """Per arm and metric (an :class:`omni.stats.verdicts.ArmTable`): ok runs of all
    runs, median, min and max over the ok runs, each in its unit; the
    ``primary`` metrics first, the others below; a VOID arm (``void``: arm ->
    why) marked, and why under the table."""
    void = void or {}
    first = [m for m in primary if m in table.metrics]
    rest = [m for m in table.metrics if m not in first]
    parts = [f"sweep {sweep_id}"]
    for title, metrics in (("primary metrics", first), ("other metrics" if first else "", rest)):
        if not metrics:
            continue
        rows = []
        for arm in table.arms:
            label = f"{arm} (VOID)" if arm in void else arm
            for metric in metrics:
                cell = table.cells[(arm, metric)]
                values = [metric_quantity(v, metric) for v in (cell.median, cell.min, cell.max)]
                rows.append([label, metric, f"{cell.n}/{table.runs[arm]}", *values])
        parts += [title] if title else []
        parts.append(grid(["arm", "metric", "n/runs", "median", "min", "max"], rows, right=(2, 3, 4, 5)))
    parts += [f"VOID {arm}: {why}; no verdict uses its runs" for arm, why in void.items() if arm in table.arms]
    return "\n".join(parts)


# --- omni topology, hosts ---


def topology(topo, load: Mapping[int, float]) -> str:
    """CPUs present, online and offline (an :class:`omni.host.topology.Topology`);
    per node its CPUs, cores, threads per core, memory and current load; the
    busiest CPUs (``load``: cpu -> % busy, empty for a fixture)."""
    lines = [
        f"CPUs present {format_cpulist(topo.present)}, online {format_cpulist(topo.online)}, "
        f"offline {format_cpulist(topo.offline) or 'none'}"
    ]
    for node in topo.nodes.values():
        cores = physical_cores(topo, node.cpus)
        smt = sorted({len(topo.siblings.get(c, (c,))) for c in node.cpus}) or [0]
        mem = quantity(node.mem_total_kb / 1024, "MiB", 3) if node.mem_total_kb else "unknown"
        busy = [load[c] for c in node.cpus if c in load]
        busy_text = f", load mean {sum(busy) / len(busy):.0f}% max {max(busy):.0f}%" if busy else ""
        lines.append(
            f"node {node.id}: cpus {format_cpulist(node.cpus) or '-'} ({len(cores)} cores, "
            f"{'x'.join(map(str, smt))} threads/core), memory {mem}{busy_text}"
        )
    if load:
        hot = sorted(((pct, cpu) for cpu, pct in load.items() if pct >= 5), reverse=True)[:16]
        lines.append("busy CPUs: " + (", ".join(f"cpu{c} {p:.0f}%" for p, c in hot) or "none >= 5%"))
    return "\n".join(lines)


def hosts(states: Iterable, now: datetime) -> str:
    """``omni hosts``: one line per fleet host, copyable (no table squeezed
    into 80 columns): alive or not, its heartbeat, facts and engine envs."""
    lines = []
    for state in states:
        f = state.facts or {}
        beat = (
            f"heartbeat {(now - state.last_heartbeat).total_seconds():.0f} s ago"
            if state.last_heartbeat
            else "no heartbeat"
        )
        topo = "; ".join(f"node {n} cpus {c}" for n, c in (f.get("topology") or {}).items()) or "topology unknown"
        lines.append(
            f"{state.name}: {'alive' if state.online else 'OFFLINE'} ({beat}); {f.get('cpu_model')}; "
            f"isa {' '.join(f.get('isa') or []) or '-'}; {topo}; kernel {f.get('kernel')}; "
            f"envs {' '.join(f.get('envs') or {}) or 'none'}; omni {str(f.get('harness_git_sha') or '?')[:12]}; "
            f"machine {f.get('hostname')}; locks {f.get('lock_dir')}"
        )
    return "\n".join(lines) or "no hosts: start omni worker --host NAME on each benchmark host"


def hosts_json(states: Iterable) -> str:
    """``omni hosts --json``: one JSON object per host and line."""
    lines = []
    for state in states:
        beat = state.last_heartbeat.isoformat() if state.last_heartbeat else None
        lines.append(
            json.dumps({"host": state.name, "alive": state.online, "last_heartbeat": beat, "facts": state.facts})
        )
    return "\n".join(lines)


# --- omni ops ---


def bad_runs(rows: Iterable) -> str:
    """The profiled runs that did not end ok (rows with arm, pass_index, status, error)."""
    return "\n".join(f"{r.arm} pass {r.pass_index}: {r.status}: {r.error}" for r in rows)


def ops_table(sweep_id: str, steps: str, arms: Sequence[str], lines: Sequence, top: int) -> str:
    """Per arm, its ``top`` heaviest ops (:class:`omni.measure.ops.OpLine`): median
    self ms per step, share of the step, calls, noise between runs."""
    rows = []
    for name in arms:
        for line in [x for x in lines if x.arm == name][:top]:
            rows.append(
                [
                    name,
                    line.op + (" (distorting)" if line.distorting else ""),
                    str(line.runs),
                    f"{line.ms_per_step:.3f}",
                    f"{line.share:.1%}",
                    f"{line.calls_per_step:.1f}",
                    f"{line.noise:.1%}" if line.noise is not None else "-",
                ]
            )
    header = ["arm", "op", "runs", "ms/step", "share", "calls/step", "noise"]
    return f"ops of {steps} steps, {sweep_id}\n" + grid(header, rows, right=(2, 3, 4, 5, 6))


def op_verdicts(base: str, other: str, comparisons: Sequence, min_effect: float, top: int) -> str:
    """``other``'s ops against ``base``'s (:class:`omni.measure.ops.OpComparison`):
    ms per step on each side, ratio, 95 % interval, verdict."""
    rows = []
    for c in comparisons[:top]:
        j = c.comparison
        ms = [f"{v:.3f}" if v is not None else "-" for v in (c.base_ms, c.other_ms)]
        if j is None:
            rows.append([c.op, *ms, "-", "-", f"only in {other if c.base_ms is None else base}"])
            continue
        interval = ratio_interval(j.ci_low, j.ci_high) if j.ci_low is not None else "-"
        rows.append([c.op, *ms, f"x{j.ratio:.3f}", interval, j.verdict])
    title = f"{other} against {base}, per op (min_effect {min_effect:.0%})"
    return (
        title + "\n" + grid(["op", f"{base} ms", f"{other} ms", "ratio", "95 % interval", "verdict"], rows, (1, 2, 3))
    )


# --- omni calibrate, provenance, retract ---


def calibration(record: Mapping, sweep_ids: Sequence[str], path) -> str:
    """``omni calibrate``: per workload, each metric's noise within a sweep and drift between sweeps."""
    from omni.stats.verdicts import MIN_DRIFT_SWEEPS

    lines = [f"calibration of host {record['host']} from sweep(s) {', '.join(sweep_ids)}:"]
    for workload, entry in sorted(record["workloads"].items()):
        lines.append(f"  workload {workload} (arms {', '.join(entry['arms'])}; {entry['runs']} runs)")
        for metric, noise in sorted(entry["noise"].items()):
            drift = entry["drift"].get(metric)
            shown = f"{drift:8.3%}" if drift is not None else "  (1 sweep)"
            lines.append(f"    {metric:<24} noise {noise:8.3%}  drift {shown}")
    if len(sweep_ids) < MIN_DRIFT_SWEEPS and any(entry["drift"] for entry in record["workloads"].values()):
        lines.append(
            f"the drift rests on {len(sweep_ids) - 1} degree(s) of freedom: compare and regressions use the default "
            f"drift until a calibration of {MIN_DRIFT_SWEEPS} sweeps or more measures it"
        )
    lines.append(f"written: {path}")
    return "\n".join(lines)


def provenance(row: Mapping, path, retracted: str | None, columns: Iterable) -> str:
    """``omni provenance``: a run's identity, arm, placement, provenance and
    validity columns (``columns``: the registry's), with the retraction if any."""
    columns = list(columns)
    lines = [f"run {row['run_id']} of sweep {row['sweep_id']} ({path})"]
    if retracted:
        lines.append(f"RETRACTED: {retracted}")
    for group in ("identity", "arm", "placement", "provenance", "validity"):
        lines.append(group)
        for col in (c for c in columns if c.group == group):
            value = row.get(col.name)
            if value is not None and value != []:
                lines.append(f"  {col.name:<26} {value}")
    return "\n".join(lines)


def retraction(row: Mapping, path) -> str:
    """``omni retract``: what was withdrawn, and where that is recorded."""
    return (
        f"retracted {row['target_kind']} {row['target']} ({len(row['run_ids'])} run(s)): {row['reason']}\n"
        f"recorded in {path}"
    )


# --- omni env, stack, models ---


def env_list(entries: Iterable[Any]) -> str:
    """``omni env list``: one block per declared env (omni.envs.inventory.EnvEntry)."""
    lines = []
    for e in entries:
        versions = ", ".join(f"{k} {v}" for k, v in e.versions.items()) or "-"
        size = quantity(e.size_bytes, "B") if e.size_bytes is not None else "-"
        lines.append(f"{e.name:<22} {e.state}")
        detail = [f"versions {versions}", f"size {size}"]
        detail += [f"llama.cpp commit {e.commit}"] if e.commit else []
        detail += [f"built {e.built_at}, key {e.key}"] if e.built_at else []
        lines.append(f"{'':<22} " + "; ".join(detail))
    return "\n".join(lines)


def env_prune(found: Iterable[Any], dry_run: bool) -> str:
    """``omni env prune``: what goes (or would), and why."""
    found = list(found)
    if not found:
        return "nothing to prune: every built env is declared or used by a stored row"
    verb = "would remove" if dry_run else "removed"
    lines = [f"{verb} {item.path} ({quantity(item.size_bytes, 'B')}): {item.why}" for item in found]
    total = sum(item.size_bytes for item in found)
    return "\n".join([*lines, f"{verb} {len(found)} env(s), {quantity(total, 'B')}"])


def key_values(pairs: Mapping[str, Any]) -> str:
    """``key  value`` lines, keys aligned (omni stack status)."""
    width = max((len(k) for k in pairs), default=0)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in pairs.items())


def model_made(preset: str, manifest: Mapping) -> str:
    """``omni models make``: the preset's digests."""
    lines = [f"{preset}: hf sha256 {manifest['hf_sha256']}"]
    lines += [f"  {entry['file']}: sha256 {entry['sha256']}" for _kind, entry in sorted(manifest["gguf"].items())]
    return "\n".join(lines)
