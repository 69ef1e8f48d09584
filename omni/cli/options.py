"""The ``omni`` command's options and arguments that commands share, each
checked as click parses it.

A hostile value (a regular file where a directory is wanted, a path through
a file, a name longer than the file system allows, an id no sweep can have,
blank words) is refused with :class:`typer.BadParameter` before the command
body runs, so before anything starts; :func:`usage_line` makes that, or any
other usage error of click's, one line naming the option and the fix, which
``omni.cli.main`` prints before exiting 2.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import typer

NAME_MAX = 255  # bytes in one path component (Linux NAME_MAX): a longer one is ENAMETOOLONG
S3_SCHEME = "s3://"


def _long_part(path: Path) -> str | None:
    long = next((part for part in path.parts if len(os.fsencode(part)) > NAME_MAX), None)
    return f"has a name longer than {NAME_MAX} bytes ({long[:20]}…)" if long else None


def _existing(path: Path) -> Path:
    return next(p for p in [path, *path.parents] if os.path.lexists(p))


def _not_a_directory(path: Path) -> str | None:
    """Why ``path`` cannot be a directory (it is a file, or lies under one); None if it is or can be made."""
    problem = _long_part(path)
    if problem:
        return problem
    existing = _existing(path)
    if os.path.isdir(existing):
        return None
    return "is a file, not a directory" if existing == path else f"lies under {existing}, a file"


def results_location(value: str) -> str:
    """--results: a directory (made when a sweep writes to it) or s3://BUCKET/PREFIX."""
    if value.startswith(S3_SCHEME):
        return value
    problem = "is empty" if not value else _not_a_directory(Path(value))
    if problem:
        raise typer.BadParameter(f"{value[:200]!r} {problem}; give a directory (made if missing) or s3://BUCKET/PREFIX")
    return value


def directory_to_make(value: Path | None) -> Path | None:
    """A directory this command may create (--lock-dir, --out): it exists, or
    its nearest existing parent is a directory this user can write in."""
    if value is None:
        return value
    problem = _not_a_directory(value)
    if problem is None:
        try:  # as root, os.access says yes to /proc, /sys and read-only mounts: try it
            with tempfile.TemporaryFile(dir=_existing(value)):
                pass
        except OSError as error:
            problem = f"cannot be made ({_existing(value)}: {error.strerror})"
    if problem:
        raise typer.BadParameter(f"{str(value)[:200]!r} {problem}; give a directory you can write (made if missing)")
    return value


def stored_id(value: str) -> str:
    """A sweep or run id, as its folder is named: no /, not starting with a dot."""
    if not value or value.startswith(".") or "/" in value or "\0" in value or len(os.fsencode(value)) > NAME_MAX:
        raise typer.BadParameter(
            f"{value[:80]!r} is no id: ids are the sweep=… and run folder names under RESULTS/runs "
            "(omni table SWEEP_ID lists a sweep's runs)"
        )
    return value


def sweep_name(value: str) -> str:
    """omni regressions SWEEP_NAME: the spec name: its sweeps share."""
    if not value or value.startswith(".") or "/" in value or "\0" in value or len(os.fsencode(value)) > NAME_MAX:
        raise typer.BadParameter(f"{value[:80]!r} is no spec name: give the name: of the repeated sweeps' spec")
    return value


def stored_ids(values: list[str] | None) -> list[str] | None:
    return [stored_id(v) for v in values] if values else values


def run_or_file(value: str | None) -> str | None:
    """A run id, a sweep id or a run file (a path: it has a /)."""
    if value is None or value.startswith(S3_SCHEME):
        return value
    if "/" not in value:
        return stored_id(value)
    problem = _long_part(Path(value))
    if problem:
        raise typer.BadParameter(f"{value[:80]!r} {problem}; give a run id, a sweep id or a run file")
    return value


def host_name(value: str) -> str:
    """omni worker --host: a fleet host's name, as a spec's hosts: names it."""
    from omni.spec.arm import HOST_NAME

    if not HOST_NAME.match(value):
        raise typer.BadParameter(f"{value[:80]!r} is no host name: use lower-case letters, digits, _ and -")
    return value


def words(value: str) -> str:
    if not value.strip():
        raise typer.BadParameter("is blank: say what is wrong in words, e.g. --reason 'host was throttling'")
    return value


RESULTS_OPT = typer.Option("results", callback=results_location, help="results: a directory or s3://BUCKET/PREFIX")
RETRACTED_OPT = typer.Option(False, "--include-retracted", help="keep retracted runs in")
METRIC_OPT = typer.Option(
    None, "--metric", help="only this metric (repeatable), e.g. decode_tok_s; default: every judged one"
)
ACROSS_HARDWARE_OPT = typer.Option(
    False,
    "--across-hardware",
    help="judge runs of different CPU models, cores per slot or engine versions anyway (the output names them)",
)
SWEEP_ID_ARG = typer.Argument(..., callback=stored_id, help="sweep id (the sweep=… folder name)")


def sysfs_root(value: Path) -> Path:
    """--sysfs-root: a root with sys/devices/system/cpu under it, this host's (/) or a fixture's."""
    if not (value / "sys" / "devices" / "system" / "cpu").is_dir():
        raise typer.BadParameter(
            f"{str(value)[:200]!r} has no sys/devices/system/cpu: give / or a sysfs fixture's root"
        )
    return value


def sysfs_option(help_text: str):
    return typer.Option(Path("/"), exists=True, file_okay=False, callback=sysfs_root, help=help_text)


def _not_finite(text: str) -> bool:
    try:
        return not math.isfinite(float(text))
    except ValueError:
        return False


def usage_line(error: Exception) -> str:
    """A usage error of click's in one line: the option or argument, the value
    given (when click knows it), what is wrong, and where to read the options."""
    ctx = getattr(error, "ctx", None)
    param = getattr(error, "param", None)
    message = " ".join(str(getattr(error, "message", "") or "").split())
    if param is None or not message:
        text = " ".join(error.format_message().split())
    else:
        name = "/".join(param.opts) if param.param_type_name == "option" else (param.metavar or param.name.upper())
        given = getattr(error.__cause__, "errors", lambda: [{}])()[0].get("input")
        message = message.replace("Input should be", "must be")
        if isinstance(given, str) and _not_finite(given):
            message = "must be a finite number"
        text = f"{name}{f' {given!r}' if given is not None else ''}: {message}"
    return text + (f" (see {ctx.command_path} --help)" if ctx is not None else "")
