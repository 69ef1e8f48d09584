"""Runs inside the two-node QEMU guest (see tests/numa_vm/boot.py): omni's own
functions on a real two-node kernel, results written where the host reads them.

    python tests/numa_vm/guest.py OUT_DIR [--capture]

Sweeps go through ``omni.sweep.prepare.prepare_sweep``/``omni.sweep.execute.run_sweep_items``,
the functions the Prefect flow calls, not through Prefect: under QEMU's software
emulation (TCG; KVM hangs at boot on these nested hosts) Python runs about
50 times slower, and Prefect's ephemeral server did not come up within its
timeout in 6 minutes. Importing ``omni.sweep.prepare`` and ``omni.sweep.execute``
takes about 40 s there; the flow adds nothing a binding check depends on.

Writes OUT_DIR/results (the Parquet dataset) and OUT_DIR/report.json
(timings, sweep ids, ``omni topology``'s output). ``--capture`` also saves
``/proc/PID/status`` and ``numa_maps`` of processes under numactl, the
canned text the unit tests parse (tests/fixtures/numa_guest/).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def uptime_s() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def synthetic(name: str, **params) -> dict:
    # a run whose cost is mostly sleeps: its wall time does not swing with
    # TCG's speed, so two slots' overlap shows in the makespan; the steady hold
    # is long enough for a sampler under TCG to read numa_maps in it
    base = {"mem_mb": 32, "load_s": 2.0, "hold_s": 3.0, "work_per_token": 200, "prefill_work_per_token": 20}
    return {"name": name, "engine": "synthetic", "prompt_len": 8, "max_tokens": 4, "params": {**base, **params}}


SWEEPS = {
    # one slot per node (cores: 1 on a 1-core-per-node guest), two runs each
    "pair": {"slots": {"cores": 1}, "passes": 2, "arms": [synthetic("a"), synthetic("b")]},
    # engines that leave their binding: each must come back invalid
    "escape": {
        "slots": {"cores": 1},
        "passes": 1,
        "arms": [synthetic("reset", escape="reset_policy"), synthetic("migrate", escape="migrate_pages")],
    },
    # one slot across both nodes, memory bound to both
    # its slot holds both CPUs, so the orchestrator's sampler shares them with the
    # engine; under TCG it went 3 s without a sample: a longer steady window
    "straddle": {"slots": {"cpus": "0-1", "straddle": True}, "passes": 1, "arms": [synthetic("wide", hold_s=8.0)]},
}


def run_sweeps(out: Path) -> dict:
    # pyarrow imports pandas lazily on the first row written: about 25 s under
    # TCG (1 s on the host), which would otherwise sit between the first and
    # second runs of every slot and hide the makespan being measured
    import pandas  # noqa: F401

    from omni.sweep.execute import run_sweep_items
    from omni.sweep.prepare import prepare_sweep
    from omni.sweep.request import SweepRequest

    report = {}
    for name, body in SWEEPS.items():
        spec = out / f"{name}.json"
        # a guest is nobody's shared host: no refusals for load, and generous time
        spec.write_text(json.dumps({"name": name, "seed": 1, "timeout_s": 240, "busy_threshold_pct": 100, **body}))
        prepared = prepare_sweep(SweepRequest(spec=spec, results=out / "results"))
        started = time.monotonic()
        rows = run_sweep_items(prepared)
        report[name] = {
            "sweep_id": prepared.sweep_id,
            "wall_s": time.monotonic() - started,
            "statuses": [r["status"] for r in rows],
        }
        print(f"guest: sweep {name}: {report[name]}", flush=True)
    return report


def capture(out: Path) -> None:
    """Canned /proc text from real numactl'd processes, for the unit tests:
    bound to node 1, to both nodes, and bound to node 1 but escaped (policy
    reset to default; pages migrated to node 0) the way the synthetic engine's
    ``escape`` does it."""
    probe = (
        "import mmap, sys\n"
        "from omni.engines.synthetic import escape_binding, touch_anonymous\n"
        "region = touch_anonymous(8)\n"
        "extra = escape_binding(sys.argv[2], [1], 8) if sys.argv[2] != 'none' else None\n"
        "open(sys.argv[1] + '/status', 'w').write(open('/proc/self/status').read())\n"
        "open(sys.argv[1] + '/numa_maps', 'w').write(open('/proc/self/numa_maps').read())\n"
    )
    cases = {
        "membind1": (["--membind=1", "--physcpubind=1"], "none"),
        "membind0-1": (["--membind=0-1", "--physcpubind=0-1"], "none"),
        "membind1-reset": (["--membind=1", "--physcpubind=1"], "reset_policy"),
        "membind1-migrated": (["--membind=1", "--physcpubind=1"], "migrate_pages"),
    }
    for label, (args, escape) in cases.items():
        folder = out / "capture" / label
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["numactl", *args, sys.executable, "-c", probe, str(folder), escape], check=True, cwd=REPO)


def omni_topology() -> dict:
    """``omni topology`` run by its command in this process, after the sweeps:
    a fresh ``omni`` process spends about a minute under TCG importing what the
    sweeps have already imported here."""
    from typer.testing import CliRunner

    from omni.cli.main import app

    started = time.monotonic()
    result = CliRunner().invoke(app, ["topology"])
    error = "".join(traceback.format_exception(result.exception)) if result.exception else ""
    return {
        "rc": result.exit_code,
        "stdout": result.stdout,
        "stderr": (result.stderr + error)[-2000:],
        "s": time.monotonic() - started,
    }


def invoke(args: list[str]) -> dict:
    """One ``omni`` command run by its command in this process (see omni_topology)."""
    from typer.testing import CliRunner

    from omni.cli.main import app

    result = CliRunner().invoke(app, args)
    error = "".join(traceback.format_exception(result.exception)) if result.exception else ""
    return {"rc": result.exit_code, "stdout": result.stdout, "stderr": (result.stderr + error)[-2000:]}


def omni_host(out: Path) -> dict:
    """``omni host check``, then ``tune`` and ``reset`` on the guest's real /sys
    and /proc (as root), every file tune may write read before, between and
    after: reset must give back what was there."""
    from omni.host.tuning import plan_tune

    started = time.monotonic()
    state = str(out / "host-tune.json")
    paths = sorted({str(w.path) for w in plan_tune("/", [1])})

    def read_all() -> dict:
        values = {}
        for path in paths:
            try:
                values[path] = Path(path).read_text()
            except OSError as error:
                values[path] = f"<{error.strerror}>"
        return values

    report = {"check": invoke(["host", "check", "--cpus", "1"]), "before": read_all()}
    report["tune"] = invoke(["host", "tune", "--cpus", "1", "--state", state])
    report["tuned"] = read_all()
    report["reset"] = invoke(["host", "reset", "--state", state])
    report["after"] = read_all()
    report["state_left"] = Path(state).exists()
    report["s"] = time.monotonic() - started
    return report


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"boot_s": uptime_s(), "python": sys.version.split()[0]}
    if "--capture" in sys.argv:
        capture(out)
    started = time.monotonic()
    report["sweeps"] = run_sweeps(out)
    report["sweeps_s"] = time.monotonic() - started
    report["topology"] = omni_topology()
    report["host"] = omni_host(out)  # last: tune changes the guest's settings until reset
    report["total_s"] = uptime_s()
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
