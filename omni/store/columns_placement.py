"""The run registry's columns of where a run ran (group placement): its slot and
binding, the NUMA memory policy and pages seen, the interference on its CPUs
and the telemetry of the loaded-to-steady window. Assembled in order by
:mod:`omni.store.columns`.
"""

from __future__ import annotations

from omni.store.column_type import BOOL, F64, I32, I64, I64S, INTS, JSON, STR, STRS, Column, declare

BINDING_METHODS = ("numactl", "sched_setaffinity", "none")

PLACEMENT: tuple[Column, ...] = declare(
    "placement",
    ("slot_index", I32, None, "NUMA slot the run was placed in"),
    ("numa_node", I32, None, "NUMA node of the slot"),
    ("cpus", INTS, None, "CPUs the run was bound to"),
    ("membind", INTS, None, "NUMA nodes memory was bound to"),
    ("binding_method", STR, None, "how the binding was applied", {"choices": BINDING_METHODS}),
    ("cpus_allowed_seen", INTS, None, "Cpus_allowed_list seen, union over the process tree"),
    (
        "mems_allowed_seen",
        INTS,
        None,
        "Mems_allowed_list seen, union over the tree: the cpuset's nodes, "
        "not the memory policy (numactl --membind does not change it)",
    ),
    ("binding_ok", BOOL, None, "CPUs, memory policy and page placement seen matched the slot"),
    ("binding_procs_checked", I32, None, "processes whose binding was checked"),
    ("straddle", BOOL, None, "the slot spans several NUMA nodes, memory bound to all of them (v3)"),
    ("slots_override", STR, None, "slots given on the command line (--cores/--node) instead of the spec's (v3)"),
    ("mempolicies_seen", STRS, None, "memory policies seen in numa_maps, every process and thread, distinct (v3)"),
    (
        "mem_anon_kib_by_node",
        I64S,
        "KiB",
        "the tree's anonymous memory per NUMA node (index = node), steady state (v3)",
    ),
    (
        "mem_file_kib_by_node",
        I64S,
        "KiB",
        "the tree's mapped file pages per NUMA node (index = node), steady state (v3)",
    ),
    (
        "mem_local_fraction",
        F64,
        None,
        "share of the tree's anonymous memory on the slot's nodes, steady state (v3)",
    ),
    ("mem_file_local_fraction", F64, None, "share of the tree's mapped file pages on the slot's nodes (v3)"),
    ("numa_by_proc", STR, None, "per process: pid, name, policies, anon/file KiB per node, JSON list (v3)", JSON),
    ("numa_maps_reads", I32, None, "reads of the whole tree's numa_maps during the run (v3)"),
    ("numa_maps_cpu_ms", F64, "ms", "CPU the sampler spent reading numa_maps, all reads (v3)"),
    (
        "numa_steady_missing",
        I32,
        None,
        "processes of the tree at the steady mark with no numa_maps read in "
        "steady state: their memory per node is from an earlier read; null: the run never got to steady (v6)",
    ),
    ("busy_max_pct", F64, "%", "busiest slot CPU's load just before the run"),
    ("busy_waited_s", F64, "s", "time the run waited for its slot's CPUs to fall below the busy threshold (v4)"),
    (
        "smt_mode",
        STR,
        None,
        "slots.smt: false (one CPU per core, siblings idle and owned by the slot), true (the engine "
        "runs on the siblings), shared (siblings left to others) (v10)",
        {"choices": ("false", "true", "shared")},
    ),
    (
        "smt_siblings",
        INTS,
        None,
        "idle SMT siblings of the slot's cores that it owned: busy-checked and CPU-locked with it (v10)",
    ),
    (
        "memory_binding_verified",
        BOOL,
        None,
        "memory policy and page placement were checked on a steady-state numa_maps read of every "
        "process; false: not checked (no numactl, no numa_maps, or a read missed steady state, which "
        "nulls the per-node columns) (v10)",
    ),
    (
        "foreign_cpu_peak_pct",
        F64,
        "%",
        "busiest slot CPU or owned sibling's time spent on work not the run's tree, in its worst "
        "window (>= 0.5 s) from the loaded mark to the steady mark, % of one CPU (v10)",
    ),
    (
        "foreign_cpu_mean_pct",
        F64,
        "%",
        "time the slot's CPUs and owned siblings spent on work not the run's tree, loaded to steady "
        "mark, % of their capacity (v10)",
    ),
    (
        "run_delay_ms",
        F64,
        "ms",
        "time the tree's threads waited runnable on a run queue (schedstat), loaded to steady mark, "
        "summed over threads (v10)",
    ),
    ("run_delay_ms_per_s", F64, "ms/s", "run_delay_ms per second of the loaded-to-steady window (v10)"),
    ("interference_samples", I32, None, "interference samples taken, loaded to steady mark (v10)"),
    ("interference_cpu_ms", F64, "ms", "CPU the sampler spent on interference samples (v10)"),
    (
        "telemetry_window_s",
        F64,
        "s",
        "the loaded-to-steady window the telemetry columns below cover (first to last interference sample) (v12)",
    ),
    (
        "ctx_switches_voluntary",
        I64,
        None,
        "voluntary context switches of the tree's threads over the window: a thread that blocked (an "
        "OpenMP barrier that slept, I/O, a lock) (v12)",
    ),
    (
        "ctx_switches_involuntary",
        I64,
        None,
        "involuntary context switches of the tree's threads over the window: the scheduler took the CPU "
        "from a runnable thread (a neighbour, another of the run's threads, a kernel thread) (v12)",
    ),
    (
        "cpu_migrations",
        I64,
        None,
        "moves of the tree's threads between CPUs over the window (se.nr_migrations of each thread's "
        "sched file); null where the kernel has no sched file (v12)",
    ),
    ("minor_faults", I64, None, "minor page faults of the tree's processes over the window (v12)"),
    (
        "major_faults",
        I64,
        None,
        "major page faults (read from disk) of the tree's processes over the window (v12)",
    ),
    (
        "steal_pct",
        F64,
        "%",
        "time the hypervisor ran something else on the slot CPUs' host cores over the window, % of "
        "their capacity (/proc/stat steal) (v12)",
    ),
    ("irq_pct", F64, "%", "hard and soft interrupt time on the slot's CPUs over the window, % of capacity (v12)"),
    (
        "cpu_freq_mhz",
        F64,
        "MHz",
        "mean of the slot CPUs' scaling_cur_freq over the window's samples; null without cpufreq (most VMs) (v12)",
    ),
    (
        "cpu_freq_min_mhz",
        F64,
        "MHz",
        "lowest slot CPU frequency sampled in the window; null without cpufreq (v12)",
    ),
    (
        "energy_j",
        F64,
        "J",
        "RAPL energy of every CPU package over the window: the sockets' whole draw, neighbours included; "
        "null where /sys/class/powercap is absent or unreadable (v12)",
    ),
    ("power_w", F64, "W", "energy_j over the window (v12)"),
    (
        "thread_sched",
        STR,
        None,
        "per engine thread over the window, busiest first (then the rest summed): name, process, tid, "
        "cpu_s, run_delay_ms, nvcsw, nivcsw, migrations, the CPUs it ran on; JSON list (v12)",
        JSON,
    ),
    ("command", STR, None, "engine command line, JSON argv list", JSON),
)
