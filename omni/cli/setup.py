"""``omni stack``, ``omni env`` and ``omni models``: what a host needs before
it sweeps (the services, the engine environments, the models), each a group
of commands that ``omni.cli.main`` adds to the ``omni`` command."""

from __future__ import annotations

from pathlib import Path

import typer

from omni import REPO_ROOT
from omni.cli import render
from omni.cli.console import err, show
from omni.cli.options import directory_to_make
from omni.errors import OmniError

stack_app = typer.Typer(
    no_args_is_help=True, help="docker-compose's stack without containers (PostgreSQL + Prefect server + S3)."
)
env_app = typer.Typer(no_args_is_help=True, help="Engine environments (.venvs/<name>).")
models_app = typer.Typer(no_args_is_help=True, help="Deterministic models (no hub, no downloads).")


@stack_app.command("up")
def stack_up() -> None:
    """Start PostgreSQL, a Prefect server on it and SeaweedFS's S3, as docker-compose.yml configures them."""
    from omni.fleet import stack

    added = stack.complete_env_file()
    if added:
        show(
            f"{stack.ENV_FILE}: added {', '.join(added)} from {stack.ENV_EXAMPLE.name} "
            "(written by an older omni; secrets random)",
            err,
        )
    url = stack.up()
    s3 = stack.s3_settings()
    # unwrapped: the lines are commands and addresses to copy
    show(f"prefect server at {url}; use it with: export PREFECT_API_URL={url}")
    show(
        f"s3 at {s3['endpoint_url']}, bucket {s3['bucket']}; keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
        f"in {stack.ENV_FILE}"
    )


@stack_app.command("down")
def stack_down() -> None:
    """Stop what `omni stack up` started."""
    from omni.fleet import stack

    show("stopped: " + (", ".join(stack.down()) or "nothing was running"))


@stack_app.command("status")
def stack_status() -> None:
    """Whether each service of the stack is running, and where."""
    from omni.fleet import stack

    show(render.key_values(stack.status()))


@env_app.command("list")
def env_list() -> None:
    """Declared engine envs and whether each is built and current."""
    from omni.envs.build import ENVS, env_info, read_stamp

    show(render.env_list((n, env_info(REPO_ROOT, n), bool(read_stamp(REPO_ROOT, n))) for n in sorted(ENVS)))


@env_app.command("build")
def env_build(name: str = typer.Argument(..., help="env name, see omni env list")) -> None:
    """Build (or complete) an engine env; a no-op when it is current."""
    from omni.envs.build import ensure_env

    info = ensure_env(REPO_ROOT, name)
    show(f"{name}: {info.python} (key {info.key}, freeze sha256 {info.freeze_sha256})")


def gguf_types(values: list[str]) -> list[str]:
    """--gguf: each a GGUF type the factory makes (a usage error, exit 2, otherwise)."""
    from omni.models.factory import GGUF_TYPES

    if unknown := [v for v in values if v not in GGUF_TYPES]:
        shown = ", ".join(repr(v[:40]) for v in unknown)
        raise typer.BadParameter(f"{shown}: no GGUF type the factory makes; give one of {', '.join(GGUF_TYPES)}")
    return values


@models_app.command("make")
def models_make(
    preset: str = typer.Argument(..., help="shape preset, e.g. tiny-llama"),
    out_dir: Path | None = typer.Option(
        None, "--out", callback=directory_to_make, help="directory (default models/PRESET)"
    ),
    gguf: list[str] = typer.Option(
        [],
        "--gguf",
        callback=gguf_types,
        help="GGUF type to make (bf16, q8_0, q4_0; repeatable) for presets that make them on demand",
    ),
) -> None:
    """Write the preset's HF directory and GGUF files; print their digests."""
    from omni.envs.resources import make_model
    from omni.models.factory import PRESETS

    if preset not in PRESETS:
        raise OmniError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    manifest = make_model(REPO_ROOT, preset, out_dir.resolve() if out_dir else None, tuple(gguf))
    show(render.model_made(preset, manifest))
