"""omni: multi-pass, NUMA-pinned benchmark sweeps of CPU LLM inference.

Layers, bottom to top. A module imports only from its own layer or below,
and no import cycle exists, function-local imports included;
tests/unit/test_layers.py holds the code to both (``LAYERS`` is what it reads).

1. pure: facts and arithmetic with no side effects beyond reading a file they
   are given; ``engines`` and ``vllm_plugin`` also run inside engine envs, so
   they import nothing of the orchestrator.
2. system: processes, files and the machine: placement, sampling, locks on
   nothing but the OS, engine envs, the results store.
3. run: one run of one arm: its plan item, CPU locks, the engine process.
4. sweep: a sweep's preparation, its runs, and what is concluded from them.
5. flows: Prefect flows and tasks, thin wrappers of layer 4.
6. cli: the ``omni`` command and what it prints.
"""

from pathlib import Path

__version__ = "0.1.0"

# The checkout omni runs from: engine envs (.venvs/), models/ and arms/ live beside it.
REPO_ROOT = Path(__file__).resolve().parent.parent

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "pure",
        (
            "omni.errors",
            "omni.procfs",
            "omni.topology",
            "omni.intervals",
            "omni.stats",
            "omni.quantiles",
            "omni.iterations",
            "omni.audit",
            "omni.mempolicy",
            "omni.models",
            "omni.provisioning",
            "omni.ops",
            "omni.heads",
            "omni.progress",
            "omni.provenance",
            "omni.hardware",
            "omni.columns",
            "omni.side_tables",
            "omni.row_check",
            "omni.units",
            "omni.load_levels",
            "omni.modes",
            "omni.swing",
            "omni.changepoints",
            "omni.sequential",
            "omni.spec",
            "omni.engines",
            "omni.vllm_plugin",
        ),
    ),
    (
        "system",
        (
            "omni.placement",
            "omni.host",
            "omni.pin",
            "omni.sampler",
            "omni.reaper",
            "omni.envs",
            "omni.resources",
            "omni.stack",
            "omni.objstore",
            "omni.store",
            "omni.compaction",
            "omni.retract",
        ),
    ),
    ("run", ("omni.plan", "omni.schedule", "omni.engine_process", "omni.serving", "omni.runner")),
    (
        "sweep",
        (
            "omni.request",
            "omni.sweep",
            "omni.fleet",
            "omni.controls",
            "omni.serving_summary",
            "omni.summary",
            "omni.compare",
            "omni.calibration",
            "omni.report",
            "omni.report_compare",
            "omni.report_html",
            "omni.simulation",
        ),
    ),
    ("flows", ("flows",)),
    (
        "cli",
        (
            "omni.cli",
            "omni.console",
            "omni.options",
            "omni.render",
            "omni.host_commands",
            "omni.fleet_commands",
            "omni.setup_commands",
            "omni.simulate_command",
        ),
    ),
)
