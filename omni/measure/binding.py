"""The binding the tree actually had, checked against its slot: the CPUs
each process and thread may use (read by the tree walk from their status)
and the memory policy and pages per node that numa_maps showed
(:mod:`omni.measure.numa_pages`); the row's binding columns and the rules on
them. Memory per node is trusted from a steady-state ``numa_maps`` read of
every process only: an earlier read may predate the engine touching its
memory, so without one the per-node columns are null and
``memory_binding_verified`` false, and no rule reads them.
"""

from __future__ import annotations

from omni.cpulist import format_cpulist
from omni.host.placement import REMOTE_WARN_LOCAL, verify_binding
from omni.measure.mempolicy import describe_nodes, node_list
from omni.measure.numa_pages import NumaSource
from omni.measure.sampler import Found, RunView, Source, Tree


class BindingSource(Source):
    """Reads nothing of its own: the tree walk's bindings and ``numa``'s pages, checked."""

    def __init__(self, numa: NumaSource) -> None:
        self.numa = numa

    def found(self, tree: Tree, run: RunView) -> Found:
        if not run.placed:  # placement planned from another host's topology: recorded, not checked
            return Found({"binding_method": run.method})
        numa = self.numa.numa_seen
        seen = {**tree.seen, **{f"{pid}/{tid}": t for (pid, tid), t in tree.threads_seen.items()}}
        check = verify_binding(seen, run.slot, membind_expected=run.method == "numactl", numa=numa)
        unread = self.numa.not_steady(tree)
        steady = unread == [] and bool(numa)
        found = Found(
            {
                "binding_method": run.method,
                "binding_ok": check.ok,
                "binding_procs_checked": check.procs_checked,
                "cpus_allowed_seen": check.cpus_seen,
                "mems_allowed_seen": check.mems_seen,
                "threads_checked": len(tree.threads_seen),
                "mempolicies_seen": check.policies_seen,
                "mem_anon_kib_by_node": node_list(check.anon_kib_by_node) if steady else None,
                "mem_file_kib_by_node": node_list(check.file_kib_by_node) if steady else None,
                "mem_local_fraction": check.local_fraction if steady else None,
                "mem_file_local_fraction": check.file_local_fraction if steady else None,
                "memory_binding_verified": check.memory_checked and steady,
                "numa_by_proc": check.per_process,
                "numa_steady_missing": None if unread is None else len(unread),
            }
        )
        if run.method == "numactl" and not check.memory_checked and run.row.get("status") == "ok":
            found.warnings.append(
                (
                    "memory_policy_unverified",
                    "no /proc/PID/numa_maps could be read for the run's processes: "
                    "the memory binding was applied by numactl but not verified (kernel without CONFIG_NUMA?)",
                )
            )
        if steady and check.local_fraction is not None and check.local_fraction < REMOTE_WARN_LOCAL:
            found.warnings.append(
                (
                    "remote_memory",
                    f"only {check.local_fraction:.0%} of the tree's anonymous memory sits on the slot's "
                    f"node(s) {format_cpulist(run.slot.mems)} ({describe_nodes(check.anon_kib_by_node)}): its "
                    "memory mostly lives off its node, so its speed is that of remote memory",
                )
            )
        if unread:
            names = ", ".join(f"{p.name} ({p.pid})" for p in unread)
            found.warnings.append(
                (
                    "numa_not_steady",
                    f"{len(unread)} process(es) got no numa_maps read in steady state ({names}): "
                    "their memory per node may predate their touching it, so mem_anon_kib_by_node, "
                    "mem_local_fraction and the remote_memory rule are left out and memory_binding_verified "
                    "is false; the steady window (params.hold_s) was too short for this host to read them",
                )
            )
        if check.violations:
            found.invalid = "process ran outside its slot: " + "; ".join(check.violations)
        return found
