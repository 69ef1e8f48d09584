"""A sweep as asked: every parameter of one sweep, typed and checked once.

``omni sweep`` parses its options into a :class:`SweepRequest`; the ``sweep``
flow's parameters are the request's fields (:func:`request_parameters`), so
a deployment's ``--param spec=...`` names them; :func:`omni.sweep.prepare.prepare_sweep`
reads the request and hands on what each run needs. A hostile value is refused
here, before anything is prepared, in one line naming the option and the fix
(``--passes 0``, a file given as ``--results``).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from omni.errors import OmniError
from omni.run.plan import SlotOverride

# the spec's own bounds for passes: and busy_wait_s: (omni.spec.settings)
PASSES_MAX = 1000
BUSY_WAIT_MAX_S = 86400.0
S3_SCHEME = "s3://"
# how a field is named to the user when it is not --name-with-dashes
OPTION_NAMES = {"spec": "SPEC", "replace_hosts": "--replace-host", "as_json": "--json"}
FLOW_ONLY = ("sweep_id", "fail_on_regression", "reproduces")  # flow parameters with no omni sweep option
# a fleet sweep's coordinator's own fields, not its hosts' (each host plans its
# slots on its own sysfs root and runs what the manifest says)
COORDINATOR_FIELDS = frozenset(
    {"spec", "passes", "resume", "sweep_id", "sysfs_root", "cores", "node", "straddle"}
    | {"force_hosts", "replace_hosts", "fail_on_regression"}
)


class RequestError(OmniError):
    """A sweep parameter the user gave wrong; the message names its option."""


def option_name(field: str) -> str:
    if field in FLOW_ONLY:
        return f"parameter {field}"
    return OPTION_NAMES.get(field, "--" + field.replace("_", "-"))


def parse_replacements(given: list[str] | tuple[str, ...] | None) -> dict[str, str]:
    """``--replace-host OLD=NEW`` (repeatable) as {old: new}."""
    out = {}
    for text in given or []:
        old, sep, new = text.partition("=")
        if not sep or not old or not new:
            raise RequestError(f"--replace-host {text!r}: give OLD=NEW, e.g. --replace-host b=c")
        out[old] = new
    return out


class SweepRequest(BaseModel):
    """One sweep's parameters. Fields left at their default defer to the spec
    (passes, busy wait, slots) or to a fresh sweep (sweep id)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: str | None = Field(None, description="sweep spec, YAML or JSON (optional with resume)")
    passes: int | None = Field(None, description="passes of every arm, instead of the spec's")
    results: str = Field("results", description="results: a directory or s3://BUCKET/PREFIX")
    force: bool = Field(False, description="run even when the slot's cores are busy (recorded)")
    sweep_id: str | None = Field(None, description="id of a new sweep (default: the spec's name and the time)")
    resume: str | None = Field(None, description="a sweep id: run only that sweep's runs not stored yet")
    sysfs_root: str = Field(
        "/", description="read the topology under this root (a fixture of another host): placement planned, not applied"
    )
    cores: tuple[str, ...] | None = Field(
        None, description="CPU lists, one slot each (e.g. 56-79): replace the spec's slots"
    )
    node: int | None = Field(None, description="put the spec's slots on this NUMA node")
    straddle: bool = Field(False, description="allow a cores list across nodes (memory bound to all)")
    busy_wait: float | None = Field(
        None, description="seconds a run waits for busy slot cores before it is refused (spec: busy_wait_s)"
    )
    force_hosts: bool = Field(False, description="fleet: split over hosts that differ (recorded)")
    replace_hosts: tuple[str, ...] | None = Field(
        None, description="fleet, with resume: OLD=NEW runs host OLD's missing runs on host NEW"
    )
    fail_on_regression: bool = Field(
        False, description="end Failed when this sweep regressed against the earlier sweeps of its spec"
    )
    note: str | None = Field(None, max_length=1000, description="free text recorded in every row of the sweep")
    reproduces: str | None = Field(
        None, max_length=300, description="the sweep this one reproduces (omni reproduce), recorded in every row"
    )
    run_ids: tuple[str, ...] | None = Field(
        None,
        description="only these runs of the plan, as omni sweep prepared them (none: every run not stored yet); "
        "a run another process holds or has stored meanwhile is skipped, not dropped from the outcomes",
    )
    # omni sweep's own: how it shows the sweep. Excluded: never flow parameters.
    dry_run: bool = Field(False, exclude=True, description="print the plan and run nothing")
    quiet: bool = Field(False, exclude=True, description="no live progress and no tables")
    as_json: bool = Field(False, exclude=True, description="one JSON object and nothing else")

    def __init__(self, **fields: Any) -> None:
        try:
            super().__init__(**fields)
        except ValidationError as error:  # a wrong type (the checks below raise RequestError themselves)
            raise RequestError("; ".join(_describe(e) for e in error.errors())) from None

    @field_validator("spec", "results", "sysfs_root", mode="before")
    @classmethod
    def _path_as_text(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("cores", "replace_hosts", mode="before")
    @classmethod
    def _empty_as_none(cls, value: Any) -> Any:
        return value or None

    @model_validator(mode="after")
    def _check(self) -> SweepRequest:
        problems = [p for p in (check(self) for check in CHECKS) if p]
        if problems:
            raise RequestError("; ".join(problems))
        return self

    @property
    def slots_override(self) -> SlotOverride | None:
        """--cores/--node/--straddle as one override of the spec's slots; None: the spec's."""
        return SlotOverride(self.cores or (), self.node, self.straddle) or None

    @property
    def replacements(self) -> dict[str, str]:
        """--replace-host as {old: new} (each checked to be OLD=NEW already)."""
        return dict(text.split("=", 1) for text in self.replace_hosts or ())

    @property
    def simulated(self) -> bool:
        """Placement planned on another host's topology (a sysfs fixture), not applied."""
        return Path(self.sysfs_root).resolve() != Path("/")

    def flow_parameters(self) -> dict[str, Any]:
        """The request as the sweep flow's parameters (JSON values)."""
        return self.model_dump(mode="json")

    def with_sweep_id(self, sweep_id: str) -> SweepRequest:
        return self.model_copy(update={"sweep_id": sweep_id})

    def resumed(self, manifest: dict, spec_copy: Path) -> SweepRequest:
        """What a resumed sweep runs: the spec copy, passes and slots it started
        with (``manifest``), and its note; slots or a note given again must be the same."""
        fields = manifest.get("slots_override")
        kept = SlotOverride(tuple(fields["cores"]), fields["node"], fields["straddle"]) if fields else None
        given = self.slots_override
        if given and given != kept:
            started = kept.describe() if kept else "the spec's slots"
            raise RequestError(
                f"sweep {manifest['sweep_id']} started on {started}; resume it without {given.describe()} "
                "(it keeps its slots) or start a new sweep"
            )
        started_note = manifest.get("request", {}).get("note")
        if self.note is not None and self.note != started_note:
            started = f"--note {started_note!r}" if started_note else "no --note"
            raise RequestError(f"sweep {manifest['sweep_id']} started with {started}: resume it without --note")
        kept = kept or SlotOverride()
        return self.model_copy(
            update={
                "spec": str(spec_copy),
                "passes": manifest["passes"],
                "sweep_id": manifest["sweep_id"],
                "cores": kept.cores or None,
                "node": kept.node,
                "straddle": kept.straddle,
                "note": started_note,
                "reproduces": manifest.get("request", {}).get("reproduces"),
            }
        )

    def fleet_part(self, sweep_id: str) -> SweepRequest:
        """What each fleet host is asked: resume ``sweep_id`` (its manifest holds
        the spec, passes and what else a sweep keeps), with every other field as
        given; the coordinator's own fields stay with it."""
        kept = {k: v for k, v in self.flow_parameters().items() if k not in COORDINATOR_FIELDS}
        return SweepRequest(**kept, resume=sweep_id)

    def recorded(self) -> dict[str, Any]:
        """What every row of the sweep records of the request."""
        override = self.slots_override
        return {
            "slots_override": override.describe() if override else None,
            "note": self.note,
            "reproduces": self.reproduces,
        }


def _describe(error: dict) -> str:
    field = str(error["loc"][0]) if error["loc"] else ""
    given = repr(error.get("input"))
    given = given if len(given) <= 60 else given[:57] + "..."  # a huge value is not repeated whole
    return f"{option_name(field)} {given}: {error['msg']}"


def _passes(r: SweepRequest) -> str | None:
    if r.passes is not None and not 1 <= r.passes <= PASSES_MAX:
        return f"--passes {r.passes}: give 1 to {PASSES_MAX} (or leave it out for the spec's passes)"
    if r.passes is not None and r.resume:
        return f"--passes cannot change on resume: sweep {r.resume} keeps the passes it started with"
    return None


def _source(r: SweepRequest) -> str | None:
    if r.resume is not None and not _sweep_id_like(r.resume):
        return f"--resume {r.resume!r} is not a sweep id: ids are the folder names under {r.results}/sweeps"
    if r.sweep_id is not None and not _sweep_id_like(r.sweep_id):
        return f"parameter sweep_id {r.sweep_id!r}: a sweep id names a folder (no /, not starting with .)"
    if r.resume and r.sweep_id not in (None, r.resume):
        return f"resume {r.resume!r} and sweep_id {r.sweep_id!r} differ; give one of them"
    if r.spec is None and not r.resume:
        return "give a sweep spec (e.g. arms/smoke.yaml), or --resume SWEEP_ID"
    return None


def _sweep_id_like(text: str) -> bool:
    return bool(text) and not text.startswith(".") and "/" not in text and "\0" not in text


def _results(r: SweepRequest) -> str | None:
    """A directory, or a place one can be made (writable unless a dry run); s3:// is checked when prepared."""
    if r.results.startswith(S3_SCHEME):
        return None
    if not r.results:
        return "--results '': give a directory (made if missing) or s3://BUCKET/PREFIX"
    path = Path(r.results)
    if os.path.lexists(path) and not os.path.isdir(path):
        return f"--results {r.results}: not a directory; give a directory (made if missing) or s3://BUCKET/PREFIX"
    existing = next(p for p in [path, *path.parents] if os.path.lexists(p))
    if not os.path.isdir(existing):
        return f"--results {r.results}: {existing} is not a directory; give a directory (made if missing)"
    if not r.dry_run and not os.access(existing, os.W_OK | os.X_OK):
        return f"--results {r.results}: {existing} is not writable by this user; give a directory you can write"
    return None


def _placement(r: SweepRequest) -> str | None:
    if not os.path.isdir(r.sysfs_root):
        return f"--sysfs-root {r.sysfs_root}: no such directory (the root of a sysfs fixture; / for this host)"
    if r.node is not None and r.node < 0:
        return f"--node {r.node}: NUMA nodes are numbered from 0 (omni topology lists them)"
    if r.straddle and not (r.cores or r.node is not None):
        return "--straddle applies to --cores or --node: give one of them, or set slots.straddle in the spec"
    if r.busy_wait is not None and not (math.isfinite(r.busy_wait) and 0 <= r.busy_wait <= BUSY_WAIT_MAX_S):
        return (
            f"--busy-wait {r.busy_wait:g}: give seconds from 0 to {BUSY_WAIT_MAX_S:g} (0: refuse a busy slot at once)"
        )
    return None


def _fleet(r: SweepRequest) -> str | None:
    try:
        parse_replacements(r.replace_hosts)
    except RequestError as error:
        return str(error)
    if r.replace_hosts and not r.resume:
        return "--replace-host is for --resume: a new sweep names its hosts in hosts:"
    return None


CHECKS: tuple[Callable[[SweepRequest], str | None], ...] = (_passes, _source, _results, _placement, _fleet)

T = TypeVar("T")


def request_parameters(body: Callable[[SweepRequest], T]) -> Callable[..., T]:
    """``body(request)`` as a function of the request's fields, one keyword
    parameter each with its type, default and description: what Prefect reads
    as a flow's parameters. Why not one ``request`` parameter: ``prefect
    deployment run --param KEY=VALUE`` sets top-level parameters only (a
    model's fields would nest under its name), and prefect.yaml's deployments
    set ``spec``, ``results`` and ``fail_on_regression`` by name."""

    def call(**fields: Any) -> T:
        return body(SweepRequest(**fields))

    functools.update_wrapper(call, body, assigned=("__module__", "__name__", "__qualname__"), updated=())
    shown = {name: field for name, field in SweepRequest.model_fields.items() if not field.exclude}
    call.__signature__ = inspect.Signature(
        [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=field.default, annotation=field.annotation)
            for name, field in shown.items()
        ]
    )
    # Google-style Args: Prefect shows each as its parameter's description
    call.__doc__ = (
        (inspect.getdoc(body) or "")
        + "\n\nArgs:\n"
        + "\n".join(f"    {name}: {field.description}" for name, field in shown.items())
    )
    return call
