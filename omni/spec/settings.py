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

``passes: auto`` runs pass after pass until every primary verdict is
conclusive (omni.stats.sequential), at most ``max_passes`` passes or ``budget``
time::

    passes: auto
    max_passes: 20
    budget: 2h
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from omni.errors import OmniError
from omni.spec.arm import Arm, Hosts, Name, SpecModel
from omni.spec.envs import EnvDecl
from omni.spec.matrix import merge_matrix, relocate
from omni.spec.problems import Problem, plain_text, problem, show, validation_error
from omni.spec.slots import SlotRequest

CONTROL_SUFFIX = ".control"
DEFAULT_PRIMARY_METRICS = ("decode_tok_s", "ttft_ms", "rss_anon_steady_mb")
# a sweep of serving arms only: what a server is for, and its memory under load
SERVING_PRIMARY_METRICS = ("capacity_concurrency", "capacity_rate", "rss_anon_steady_mb")
PASSES_MAX = 1000
DEFAULT_MAX_PASSES = 20  # passes: auto without max_passes (omni.stats.sequential.DEFAULT_MAX_PASSES)
# a budget: seconds, or hours/minutes/seconds as in 2h, 1h30m, 90s
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_duration(text: str) -> float | None:
    """Seconds in ``2h``, ``1h30m``, ``45m``, ``90s``, ``1.5h``; None when it is none of those."""
    match = _DURATION.match(text.strip().replace(" ", ""))
    if not match or not any(match.groups()):
        return None
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return 3600 * hours + 60 * minutes + seconds


class Sweep(SpecModel):
    """A set of arms, each run ``passes`` times in a seeded interleaved order."""

    name: Name
    description: str | None = None
    # a number, or auto: pass after pass until every primary verdict is conclusive (omni.stats.sequential)
    passes: int | Literal["auto"] = 3
    max_passes: int | None = Field(None, ge=3, le=PASSES_MAX)  # passes: auto only; default 20
    # passes: auto only: no pass starts that the time left would not finish (seconds, or 2h, 30m, 1h30m)
    budget: float | str | None = None
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
    # judged metrics share the rest (omni.stats.verdicts.adjust_for_multiplicity)
    primary_metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_PRIMARY_METRICS), min_length=1)
    slots: SlotRequest = SlotRequest()
    # a fleet sweep: the plan runs on these omni worker hosts (omni.fleet.hosts); unset: on this host
    hosts: Hosts | None = None
    # a live A/A control: a replica of the baseline arm, named
    # "<baseline>.control", interleaved like any arm; its verdict against the
    # baseline says whether the host behaved during this sweep.
    # None: on when there is something to compare (2 arms or more) and 3 passes or more
    control: bool | None = None
    # engine envs of this sweep's own, beside envs.yaml's (omni.spec.envs): an arm names one in engine_env
    envs: dict[Name, EnvDecl] = {}
    arms: list[Arm] = []  # explicit arms, then those of matrix: blocks, then the control

    @field_validator("passes", mode="plain")
    @classmethod
    def _passes(cls, value: Any) -> int | str:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise problem(f"must be an integer or auto, got {show(value)}")
        if not 1 <= value <= PASSES_MAX:
            raise problem("must be >= 1" if value < 1 else f"must be <= {PASSES_MAX}")
        return value

    @field_validator("budget", mode="plain")
    @classmethod
    def _budget(cls, value: Any) -> float | None:
        if value is None:
            return None
        seconds = parse_duration(value) if isinstance(value, str) else value
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
            raise problem(f"{show(value)} is no time budget; give seconds (7200) or a duration: 2h, 1h30m, 45m, 90s")
        return float(seconds)

    @field_validator("min_effect")
    @classmethod
    def _min_effect(cls, value: float | dict[str, float] | None) -> float | dict[str, float] | None:
        from omni.store.columns import metric_columns  # the metrics a verdict is given for

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
        from omni.store.columns import metric_columns

        for name in value:
            if name not in metric_columns():
                raise problem(f"{name!r} is no judged metric; use one of {', '.join(sorted(metric_columns()))}")
        if len(set(value)) < len(value):
            raise problem("a metric is named twice")
        return value

    @property
    def auto(self) -> bool:
        """``passes: auto``: the sweep stops by the sequential rule (omni.stats.sequential)."""
        return self.passes == "auto"

    @property
    def planned_passes(self) -> int:
        """The passes planned: ``passes``, or for ``auto`` the most it may run."""
        return (self.max_passes or DEFAULT_MAX_PASSES) if self.passes == "auto" else self.passes

    @property
    def baseline_arm(self) -> str:
        return self.baseline if self.baseline is not None else self.arms[0].name

    @property
    def control_arm(self) -> str | None:
        """The name of the A/A control arm, None when the sweep has none."""
        name = f"{self.baseline_arm}{CONTROL_SUFFIX}"
        if self.control is None:
            planned = len([a for a in self.arms if a.name != name]) >= 2 and self.planned_passes >= 3
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
            problems += sweep._arm_problems() + sweep._auto_problems()
        if problems:
            raise validation_error(cls.__name__, [relocate(p, origins) for p in problems])
        if "primary_metrics" not in data and sweep.arms and all(a.load is not None for a in sweep.arms):
            sweep = sweep.model_copy(update={"primary_metrics": list(SERVING_PRIMARY_METRICS)})
        return sweep._with_control()

    def _auto_problems(self) -> list[Problem]:
        """passes: auto needs something to judge, and its own fields need it."""
        if not self.auto:
            return [
                ((key,), f"{key} is for passes: auto; set passes: auto or remove {key}")
                for key in ("max_passes", "budget")
                if getattr(self, key) is not None
            ]
        compared = [a for a in self.arms if a.name != f"{self.baseline_arm}{CONTROL_SUFFIX}"]
        problems: list[Problem] = []
        if len(compared) < 2:
            problems.append(
                (
                    ("passes",),
                    "auto stops when every arm is judged against the baseline: it needs a baseline and "
                    f"2 arms or more, this sweep has {len(compared)}; give a number of passes",
                )
            )
        if self.hosts is not None:
            problems.append((("passes",), "auto runs on one host; a fleet sweep (hosts:) needs a number of passes"))
        return problems

    @model_validator(mode="after")
    def _declared_envs(self, info: ValidationInfo) -> Sweep:
        """Checked against envs.yaml as it is now, so not for a stored sweep's
        spec copy (read for its settings alone): its envs may be gone since,
        and its rows stay readable."""
        if (info.context or {}).get("read_files", True) and (problems := self._env_problems()):
            raise validation_error("Sweep", problems)
        return self

    def _env_problems(self) -> list[Problem]:
        """Each arm's engine_env is declared (envs.yaml or envs:) and is one of its engine."""
        from omni import REPO_ROOT
        from omni.spec.envs import declared_envs

        try:
            declared = declared_envs(REPO_ROOT, self.envs)
        except OmniError as err:
            return [(("envs",), str(err))]
        problems: list[Problem] = []
        for i, arm in enumerate(self.arms):
            if arm.engine_env is None:
                continue
            if arm.engine_env not in declared.envs:
                problems.append(
                    (
                        ("arms", i, "engine_env"),
                        f"no env is named {arm.engine_env!r}; declared: {', '.join(sorted(declared.envs))} "
                        "(declare it in envs.yaml or the spec's envs: block)",
                    )
                )
            elif declared.envs[arm.engine_env].engine not in (None, arm.engine):
                engine = declared.envs[arm.engine_env].engine
                problems.append(
                    (("arms", i, "engine_env"), f"{arm.engine_env!r} is an env of {engine}, not {arm.engine}")
                )
        return problems

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
