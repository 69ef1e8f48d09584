"""Where runs go on a host: slots of whole cores or explicit cpulists, and
the load generator's CPUs beside each (a spec's ``slots:``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from omni.cpulist import parse_cpulist
from omni.errors import OmniError
from omni.spec.arm import SpecModel
from omni.spec.problems import problem, show, validation_error


class SlotRequest(SpecModel):
    """Where runs go: slots of ``cores`` physical cores, or explicit cpulists.

    Slots run at the same time, one run each. ``cpus: "56-79"`` is one slot,
    ``cpus: ["0-23", "56-79"]`` two; memory binds to the node owning a slot's
    CPUs, and a slot that spans nodes is refused unless ``straddle: true``.
    """

    cores: int | None = Field(None, ge=1)  # None: all cores of the node
    cpus: str | list[str] | None = None  # kernel cpulist(s), e.g. "0-3,8"
    node: int | None = Field(None, ge=0)
    # false: one CPU per core, the cores' SMT siblings left idle and owned by the
    # slot (busy-checked, locked); true: the siblings run the engine too;
    # shared: one CPU per core, the siblings left to others
    smt: bool | Literal["shared"] = False
    straddle: bool = False  # allow a cpulist across nodes (memory bound to all of them)
    count: int | None = Field(None, ge=1)  # at most this many slots
    # serving arms: each slot also holds this many physical cores (or these
    # cpulists, one per slot) for the load generator, apart from the server's
    client_cores: int | None = Field(None, ge=1)
    client_cpus: str | list[str] | None = None

    @field_validator("smt", mode="before")
    @classmethod
    def _smt(cls, value: Any) -> bool | str:
        if isinstance(value, bool) or value == "shared":
            return value
        raise problem(
            f"{show(value)} is not false, true or shared (false: one CPU per core, the siblings idle and "
            "owned by the slot; true: the engine runs on the siblings too; shared: the siblings left to others)"
        )

    @field_validator("cpus", "client_cpus")
    @classmethod
    def _cpulist(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value is None:
            return value
        if isinstance(value, list) and not value:
            raise problem("must name at least one cpulist, e.g. ['0-3', '4-7']")
        for text in [value] if isinstance(value, str) else value:
            try:
                cpus = parse_cpulist(text)
            except OmniError as err:
                raise problem(str(err)) from None
            if not cpus:
                raise problem("must name at least one CPU, e.g. '0-3'")
        return value

    @model_validator(mode="after")
    def _cores_or_cpus(self) -> SlotRequest:
        problems = []
        if self.cores is not None and self.cpus is not None:
            problems.append((("cpus",), "give cores or cpus, not both (cores: how many; cpus: which ones)"))
        if self.node is not None and self.cpus is not None:
            problems.append((("node",), "give node or cpus, not both (explicit CPUs already name their node)"))
        if self.client_cores is not None and self.client_cpus is not None:
            problems.append((("client_cpus",), "give client_cores or client_cpus, not both"))
        if self.client_cores is not None and self.cpus is not None:
            problems.append(
                (("client_cores",), "with explicit server CPUs (cpus:) name the load generator's too (client_cpus:)")
            )
        if self.client_cpus is not None and self.cpus is None:
            problems.append(
                (("client_cpus",), "explicit client CPUs need explicit server CPUs (cpus:); or give client_cores")
            )
        if self.client_cpus is not None and self.cpus is not None:
            servers, clients = self.cpu_lists(), self.client_cpu_lists()
            if len(clients) != len(servers):
                problems.append(
                    (
                        ("client_cpus",),
                        f"give one client cpulist per slot: {len(servers)} slot(s), {len(clients)} given",
                    )
                )
            for server, client in zip(servers, clients, strict=False):
                if shared := sorted(set(server) & set(client)):
                    problems.append(
                        (
                            ("client_cpus",),
                            f"the load generator would share CPU(s) {','.join(map(str, shared))} with the server "
                            "it measures; give it CPUs of its own",
                        )
                    )
        if problems:
            raise validation_error("SlotRequest", problems)
        return self

    def cpu_lists(self) -> list[list[int]] | None:
        return _cpu_lists(self.cpus)

    def client_cpu_lists(self) -> list[list[int]] | None:
        return _cpu_lists(self.client_cpus)


def _cpu_lists(value: str | list[str] | None) -> list[list[int]] | None:
    if value is None:
        return None
    return [parse_cpulist(text) for text in ([value] if isinstance(value, str) else value)]
