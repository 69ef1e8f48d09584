"""From a loaded spec to the ordered list of runs.

Runs are interleaved, not blocked: each pass runs every arm once, in an
order shuffled per pass by the sweep's seed, so slow drift of the host (heat,
a neighbour's job) spreads over all arms instead of landing on one. Arms
rotate over the slots pass by pass, so each arm runs on each slot equally
often and a slot's own speed (its socket, its neighbours) is a block the
verdicts remove (omni.report.verdicts), not part of one arm.
"""

from __future__ import annotations

import hashlib
import random
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from omni.errors import OmniError
from omni.host.topology import Slot, allocate_slots, read_topology
from omni.spec import Arm, LoadedSpec, SlotRequest, canonical_arm_json


def new_sweep_id(name: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{name}-{stamp}-{secrets.token_hex(2)}"


def run_id_for(sweep_id: str, arm_json: str, pass_index: int, profiled: bool = False, host: str | None = None) -> str:
    """A run's identity: a hash of the sweep, the canonical arm and the pass
    (a profiled pass is a pass of its own); in a replicated fleet sweep, the
    host whose copy of the plan it belongs to."""
    key = (
        f"{sweep_id}\n{arm_json}\n{pass_index}"
        + ("\nprofiled" if profiled else "")
        + (f"\nhost={host}" if host else "")
    )
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PlanItem:
    """One (arm, pass) placed on a slot, with its identity."""

    run_id: str
    sweep_id: str
    sweep_name: str
    arm: Arm
    pass_index: int
    order_index: int
    slot: Slot
    attempt: int = 1
    profiled: bool = False  # a profiled pass (profile:): per-op times, never a timed pass


@dataclass(frozen=True)
class SlotOverride:
    """Slots given on the command line (the origin harness's ``--cores``):
    ``--cores 56-79`` (repeatable, one slot each) replaces the spec's slot
    request; ``--node 1`` keeps its cores/smt/count and moves it to node 1."""

    cores: tuple[str, ...] = ()
    node: int | None = None
    straddle: bool = False

    def __bool__(self) -> bool:
        return bool(self.cores) or self.node is not None

    def describe(self) -> str:
        parts = [f"--cores {c}" for c in self.cores]
        parts += [f"--node {self.node}"] if self.node is not None else []
        parts += ["--straddle"] if self.straddle else []
        return " ".join(parts)

    def apply(self, req: SlotRequest) -> SlotRequest:
        """The spec's request with this override, validated as ``slots:`` is."""
        if self.cores and self.node is not None:
            raise OmniError("give --cores or --node, not both (explicit CPUs already name their node)")
        fields = req.model_dump()
        if self.cores:
            fields.update(cpus=list(self.cores) if len(self.cores) > 1 else self.cores[0], cores=None, node=None)
        if self.node is not None:
            fields.update(node=self.node, cpus=None)
        fields["straddle"] = fields["straddle"] or self.straddle
        try:
            return SlotRequest.model_validate(fields)
        except ValidationError as err:
            problems = "; ".join(
                f"{_cli_flag(e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in err.errors()
            )
            raise OmniError(f"{self.describe()}: {problems}") from None


def _cli_flag(loc: tuple) -> str:
    return {"cpus": "--cores", "node": "--node"}.get(str(loc[0]) if loc else "", f"slots.{'.'.join(map(str, loc))}")


def sweep_slots(loaded: LoadedSpec, sysfs_root: str | Path = "/", override: SlotOverride | None = None) -> list[Slot]:
    """The spec's slot request (or the command line's) cut from this host's
    topology; errors name where the request came from."""
    req = override.apply(loaded.sweep.slots) if override else loaded.sweep.slots
    source = f"{override.describe()} (overriding {loaded.path}'s slots)" if override else str(loaded.path)
    try:
        return allocate_slots(
            read_topology(sysfs_root),
            cores=req.cores,
            cpus=req.cpu_lists(),
            node=req.node,
            smt=req.smt,
            straddle=req.straddle,
            count=req.count,
            client_cores=req.client_cores,
            client_cpus=req.client_cpu_lists(),
        )
    except OmniError as err:
        raise OmniError(f"{source}: {err}") from None


def plan_sweep(
    loaded: LoadedSpec, sweep_id: str, slots: list[Slot], passes: int | None = None, host: str | None = None
) -> list[PlanItem]:
    """Every (arm, pass) in a seeded interleaved order, then the profiled
    passes of the arms that ask for them (``profile:``), interleaved the same way.

    Each item's slot is its assignment (:func:`rotated_slot`): a cyclic Latin
    square of arms over slots, so over any ``len(slots)`` passes each arm
    visits each slot once. Were runs to take whichever slot frees first, a
    60 s vLLM arm beside a 5 s llama.cpp one would sit on one slot nearly
    every pass, and slot and arm would be one factor. At run time an item
    waits for its slot (:func:`omni.run.schedule.dispatch`). ``host``: the fleet
    host whose copy of a replicated plan this is (its runs get ids of their own).
    """
    sweep = loaded.sweep
    rng = random.Random(sweep.seed)
    items: list[PlanItem] = []
    passes = passes or sweep.planned_passes
    # a defaulted control needs 3 passes: a --passes below that drops it too
    dropped = sweep.control_arm if sweep.control is None and passes < 3 else None
    arms = [a for a in sweep.arms if a.name != dropped]
    rounds = [(p, arms, False) for p in range(passes)]
    profiled = [a for a in arms if a.profile is not None]
    rounds += [
        (p, [a for a in profiled if p < a.profile.passes], True)
        for p in range(max((a.profile.passes for a in profiled), default=0))
    ]
    position = {arm.name: i for i, arm in enumerate(arms)}
    for pass_index, round_arms, is_profiled in rounds:
        round_arms = list(round_arms)
        rng.shuffle(round_arms)
        for arm in round_arms:
            order = len(items)
            items.append(
                PlanItem(
                    run_id=run_id_for(sweep_id, canonical_arm_json(arm), pass_index, is_profiled, host),
                    sweep_id=sweep_id,
                    sweep_name=sweep.name,
                    arm=arm,
                    pass_index=pass_index,
                    order_index=order,
                    slot=rotated_slot(slots, position[arm.name], pass_index),
                    profiled=is_profiled,
                )
            )
    return items


def rotation_balance(passes: int, slots: int) -> str | None:
    """Why ``passes`` leave the arms' rotation over ``slots`` unbalanced, and
    the nearest passes that balance it; None where it is balanced (or one slot).

    Over a multiple of ``slots`` passes each arm runs equally often on each
    slot, and a slot's speed cancels from every comparison; otherwise each
    arm runs some slots once more than others, the fit must estimate the
    slots' speeds from the arms' imbalance, and that costs the verdict
    residual degrees of freedom: in ``omni simulate`` a 10 % slowdown at 2 %
    noise in a 4-arm sweep over 2 slots was called at 3 passes in 38 % of
    sweeps, at 4 passes in 94 %."""
    if slots < 2 or passes % slots == 0:
        return None
    low, high = passes - passes % slots, passes + slots - passes % slots
    near = f"{high}" if low < 2 else f"{low} or {high}"
    per = f"{passes // slots} or {passes // slots + 1}"
    return (
        f"unbalanced rotation: {passes} passes over {slots} slots run each arm {per} times per slot, so the "
        f"verdicts fit the slots' speeds from the imbalance and decide less; passes: {near} balance it"
    )


def rotated_slot(slots: list[Slot], arm_position: int, pass_index: int) -> Slot:
    """The slot of an arm's pass: arm i in pass p runs on slot (i + p) mod
    len(slots), a cyclic Latin square; one slot: that slot."""
    return slots[(arm_position + pass_index) % len(slots)]
