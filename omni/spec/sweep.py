"""The sweep: its settings, its arms (explicit, from ``matrix:``, the control).

::

    name: mem-threads
    passes: 3
    arms:
      - {name: plain, engine: synthetic}
    matrix:
      - name: "mem{params.mem_mb}-t{threads}"
        base: {engine: synthetic}
        axes: {threads: [1, 2]}
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator

from omni.spec.matrix import merge_matrix, relocate
from omni.spec.models import Arm, Hosts, Name, SlotRequest, SpecModel
from omni.spec.problems import Problem, plain_text, problem, validation_error

CONTROL_SUFFIX = ".control"
DEFAULT_PRIMARY_METRICS = ("decode_tok_s", "ttft_ms", "rss_anon_steady_mb")
# a sweep of serving arms only: what a server is for, and its memory under load
SERVING_PRIMARY_METRICS = ("capacity_concurrency", "capacity_rate", "rss_anon_steady_mb")


class Sweep(SpecModel):
    """A set of arms, each run ``passes`` times in a seeded interleaved order."""

    name: Name
    description: str | None = None
    passes: int = Field(3, ge=1, le=1000)
    seed: int = 0
    timeout_s: float = Field(600.0, gt=0)
    # a slot CPU (or idle SMT sibling) busier than this with others' work refuses
    # the run: one slowed thread stalls every OpenMP barrier (docs/placement.md)
    busy_threshold_pct: float = Field(10.0, gt=0, le=100)
    # seconds a run waits for its slot's CPUs to fall below the threshold,
    # re-checking, before it is refused; 0 refuses at once
    busy_wait_s: float = Field(0.0, ge=0, le=86400)
    baseline: str | None = None  # default: the first arm
    # the smallest relative effect that matters: one number for every metric,
    # or {default: 0.05, decode_tok_s: 0.02, ...}; unset: 5 % times, 1 % memory
    min_effect: float | dict[str, float] | None = None
    # the metrics the sweep is for: shown first in every view, and their
    # verdicts take most of the sweep's 5 % chance of a false call; the other
    # judged metrics share the rest (omni.stats.adjust_for_multiplicity)
    primary_metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_PRIMARY_METRICS), min_length=1)
    slots: SlotRequest = SlotRequest()
    # a fleet sweep: the plan runs on these omni worker hosts (omni.fleet); unset: on this host
    hosts: Hosts | None = None
    # a live A/A control: a replica of the baseline arm, named
    # "<baseline>.control", interleaved like any arm; its verdict against the
    # baseline says whether the host behaved during this sweep.
    # None: on when there is something to compare (2 arms or more) and 3 passes or more
    control: bool | None = None
    arms: list[Arm] = []  # explicit arms, then those of matrix: blocks, then the control

    @field_validator("min_effect")
    @classmethod
    def _min_effect(cls, value: float | dict[str, float] | None) -> float | dict[str, float] | None:
        from omni.columns import metric_columns  # the metrics a verdict is given for

        for key, effect in ({"default": value} if isinstance(value, (int, float)) else value or {}).items():
            if not 0 < effect < 1:
                raise problem(f"{key}: {effect} is not a relative effect; give e.g. 0.05 for 5 %")
            if key != "default" and key not in metric_columns():
                raise problem(
                    f"{key!r} is no judged metric; use default or one of {', '.join(sorted(metric_columns()))}"
                )
        return value

    @field_validator("primary_metrics")
    @classmethod
    def _primary_metrics(cls, value: list[str]) -> list[str]:
        from omni.columns import metric_columns

        for name in value:
            if name not in metric_columns():
                raise problem(f"{name!r} is no judged metric; use one of {', '.join(sorted(metric_columns()))}")
        if len(set(value)) < len(value):
            raise problem("a metric is named twice")
        return value

    @property
    def baseline_arm(self) -> str:
        return self.baseline if self.baseline is not None else self.arms[0].name

    @property
    def control_arm(self) -> str | None:
        """The name of the A/A control arm, None when the sweep has none."""
        name = f"{self.baseline_arm}{CONTROL_SUFFIX}"
        if self.control is None:
            planned = len([a for a in self.arms if a.name != name]) >= 2 and self.passes >= 3
        else:
            planned = self.control
        return name if planned else None

    def _with_control(self) -> Sweep:
        """The sweep with its control arm appended (once: a sweep read back
        from its own dump already has it); the control replicates the
        baseline's timed runs, not its profiled ones."""
        name = self.control_arm
        if name is None or any(a.name == name for a in self.arms):
            return self
        base = next(a for a in self.arms if a.name == self.baseline_arm)
        return self.model_copy(update={"arms": [*self.arms, base.model_copy(update={"name": name, "profile": None})]})

    @classmethod
    def known_keys(cls) -> list[str]:
        return [*cls.model_fields, "matrix"]

    @classmethod
    def _validate(cls, data: Any, handler: Any) -> Any:
        if not isinstance(data, dict):
            return handler(data)
        data, origins, problems = merge_matrix(data)
        try:
            sweep = handler(data)
        except ValidationError as err:
            problems += [(e["loc"], plain_text(e, cls)) for e in err.errors()]
        else:
            problems += sweep._arm_problems()
        if problems:
            raise validation_error(cls.__name__, [relocate(p, origins) for p in problems])
        if "primary_metrics" not in data and sweep.arms and all(a.load is not None for a in sweep.arms):
            sweep = sweep.model_copy(update={"primary_metrics": list(SERVING_PRIMARY_METRICS)})
        return sweep._with_control()

    def _arm_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        seen: set[str] = set()
        for i, arm in enumerate(self.arms):
            if arm.name in seen:
                problems.append((("arms", i, "name"), f"arm name {arm.name!r} is used by an earlier arm too"))
            if arm.name.endswith(CONTROL_SUFFIX) and arm.name != f"{self.baseline_arm}{CONTROL_SUFFIX}":
                problems.append(
                    (
                        ("arms", i, "name"),
                        f"arm names ending in {CONTROL_SUFFIX!r} are kept for the "
                        "A/A control arm omni adds (control: true); rename the arm",
                    )
                )
            seen.add(arm.name)
            if arm.load is not None and self.slots.client_cores is None and self.slots.client_cpus is None:
                problems.append(
                    (
                        ("arms", i, "load"),
                        f"serving arm {arm.name!r} needs CPUs for its load generator apart from the server's: "
                        "set slots.client_cores (e.g. slots: {cores: 1, client_cores: 1}) or slots.client_cpus",
                    )
                )
            if arm.load is not None and arm.profile is not None:
                problems.append(
                    (("arms", i, "profile"), "a serving arm is not profiled; profile the offline arm of its config")
                )
        if self.baseline is not None and self.baseline not in seen:
            names = ", ".join(a.name for a in self.arms)
            problems.append((("baseline",), f"no arm is named {self.baseline!r} (arms: {names})"))
        return problems
