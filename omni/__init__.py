"""omni: multi-pass, NUMA-pinned benchmark sweeps of CPU LLM inference.

The package is cut by subsystem; each subpackage's docstring says its job and
the layer of each of its modules. The layers, bottom to top: a module imports
only from its own layer or below, and no import cycle exists, function-local
imports included. tests/unit/test_layers.py holds the code to every rule
stated here (``LAYERS``, ``ENGINE_SIDE``, ``ENGINE_LIBRARIES``, ``PREFECT``).

1. engine side: code that also runs inside engine envs, which hold an engine
   and not omni's dependencies: the standard library, the engine's own
   libraries (``ENGINE_LIBRARIES``) and each other, nothing else of omni.
2. facts: parsing, arithmetic and declarations. No process started, nothing
   written, no state kept between calls; input comes as arguments or from a
   file or directory an argument names.
3. system: processes, files and the machine: the host's topology, conditions
   and pinning, sampling from outside, killing, engine envs, the stack, the
   results store.
4. run: one run of one arm: its plan item, CPU locks, the engine process.
5. sweep: a sweep's preparation, its runs, what is concluded from them, and
   the fleet's coordination (which reads hosts through Prefect's client).
6. flows: Prefect flows, tasks, the worker and the temporary API server.
7. cli: the ``omni`` command and what it prints.
"""

from pathlib import Path

__version__ = "0.1.0"

# The checkout omni runs from: engine envs (.venvs/), models/ and arms/ live beside it.
REPO_ROOT = Path(__file__).resolve().parent.parent

# A prefix names a package or module; the longest prefix naming a module decides its layer.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "engine side",
        ("omni.errors", "omni.cpulist", "omni.engines", "omni.vllm_plugin", "omni.models", "omni.host.matmul_probe"),
    ),
    (
        "facts",
        (
            "omni.spec",
            "omni.stats",
            "omni.history.hardware",
            "omni.store.columns",
            "omni.store.column_type",
            "omni.store.columns_run",
            "omni.store.columns_placement",
            "omni.store.columns_metrics",
            "omni.store.columns_roofs",
            "omni.store.columns_validity",
            "omni.store.side_tables",
            "omni.store.row_check",
            "omni.measure.mempolicy",
            "omni.measure.iterations",
            "omni.measure.ops",
            "omni.measure.heads",
            "omni.measure.audit",
            "omni.measure.kv",
            "omni.measure.roofline",
            "omni.measure.traffic",
            "omni.serving.levels",
            "omni.serving.server_metrics",
            "omni.serving.slo",
            "omni.serving.window",
            "omni.serving.search",
            "omni.report.units",
        ),
    ),
    (
        "system",
        (
            "omni.host",
            "omni.measure",
            "omni.envs",
            "omni.store",
            "omni.fleet.stack",
            "omni.run.reaper",
            "omni.run.progress",
        ),
    ),
    ("run", ("omni.run", "omni.serving")),
    (
        "sweep",
        (
            "omni.sweep",
            "omni.fleet",
            "omni.history",
            "omni.report",
            "omni.serving.summary",
            "omni.stats.controls",
            "omni.stats.simulation",
            "omni.stats.sweep_simulation",
        ),
    ),
    ("flows", ("flows",)),
    ("cli", ("omni.cli",)),
)

# The modules an engine subprocess imports (the first layer): they import the
# standard library, these libraries of the engines, and each other only.
ENGINE_SIDE = LAYERS[0][1]
ENGINE_LIBRARIES = frozenset(
    {"vllm", "torch", "llama_cpp", "gguf", "numpy", "aiohttp"}
)  # aiohttp: vLLM's benchmark client

# Where Prefect is imported: the flows, and the fleet's reads of its hosts.
PREFECT = ("flows", "omni.fleet.hosts")
