"""``omni stack``, ``omni env`` and ``omni models``: what a host needs before
it sweeps (the services, the engine environments, the models), each a group
of commands that ``omni.cli.main`` adds to the ``omni`` command."""

from __future__ import annotations

from pathlib import Path

import typer

from omni import REPO_ROOT
from omni.cli import render
from omni.cli.console import err, show
from omni.cli.options import directory_to_make, results_location
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
def env_list(
    spec: Path | None = typer.Option(
        None, "--spec", exists=True, dir_okay=False, help="also the envs this spec declares in its envs: block"
    ),
) -> None:
    """Declared engine envs: state, package versions, llama.cpp commit, size on disk."""
    from omni.envs.inventory import list_envs

    show(render.env_list(list_envs(REPO_ROOT, declared(spec))))


@env_app.command("build")
def env_build(
    name: str = typer.Argument(..., help="env name, see omni env list"),
    spec: Path | None = typer.Option(
        None, "--spec", exists=True, dir_okay=False, help="a spec whose envs: block declares the env"
    ),
) -> None:
    """Build (or complete) an engine env; a no-op when it is current. An env
    following the newest release is resolved against the index first."""
    from omni.envs.build import ensure_env
    from omni.envs.releases import resolve

    env = resolve(declared(spec).spec(name))
    info = ensure_env(REPO_ROOT, name, env)
    show(f"{name}: {' '.join(env.requirements) or 'nothing to install'}; {info.python} (key {info.key})")


@env_app.command("prune")
def env_prune(
    results: str = typer.Option(
        "results", "--results", callback=results_location, help="results store whose rows keep their envs"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="say what would go, remove nothing"),
) -> None:
    """Remove built envs (and the machine's kept copies) that no declaration
    of envs.yaml and no stored, unretracted row needs (an env only a spec
    declares is kept by its rows)."""
    from omni.envs.inventory import prunable, prune

    found = prunable(REPO_ROOT, declared(None), used_env_keys(results))
    show(render.env_prune(found, dry_run))
    if not dry_run:
        prune(found)


def declared(spec: Path | None):
    from omni.spec import load_spec
    from omni.spec.envs import declared_envs

    return declared_envs(REPO_ROOT, load_spec(spec).sweep.envs if spec else None)


def used_env_keys(results: str) -> set[str]:
    """The env keys of the store's rows, retracted ones left out."""
    from omni.store.reading import load_runs
    from omni.store.retract import without_retracted

    if not Path(results).exists() and "://" not in results:
        raise OmniError(
            f"no results store at {results}: prune keeps every env a stored row ran in, so it needs the "
            "store; give --results DIR (an empty directory if there are no results)"
        )
    frame = load_runs(results, columns=["run_id", "engine_env_key"])
    kept, _ = without_retracted(frame, results)
    return set(kept["engine_env_key"].dropna())


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
