"""The docker-compose stack without containers: PostgreSQL from Debian's
package and ``prefect server`` on it, configured from ``docker-compose.yml``
itself so the two cannot drift apart.

    omni stack up      # .env created with a random password when missing
    omni stack status
    omni stack down    # stops what ``up`` started, nothing else

The prefect-server service's environment is read from the compose file and
interpolated from ``.env`` as compose would; only the database host changes
(compose's service name ``postgres`` becomes loopback). State (pids, what was
started, logs) lives in ``.stack/``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from omni.errors import OmniError

REPO_ROOT = Path(__file__).resolve().parent.parent
COMPOSE = REPO_ROOT / "docker-compose.yml"
ENV_EXAMPLE = REPO_ROOT / "deploy" / "stack.env.example"
ENV_FILE = REPO_ROOT / ".env"
STATE_DIR = REPO_ROOT / ".stack"
POOL = "omni"
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


def ensure_env_file(path: Path = ENV_FILE) -> dict[str, str]:
    """``.env``, written from the example with a random password when missing."""
    if not path.exists():
        text = ENV_EXAMPLE.read_text().replace("POSTGRES_PASSWORD=change-me", f"POSTGRES_PASSWORD={secrets.token_hex(16)}")
        path.write_text(text)
        path.chmod(0o600)
    return read_env_file(path)


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


def database_url(settings: dict[str, str], hide_password: bool = True) -> str:
    password = "***" if hide_password else settings["PREFECT_SERVER_DATABASE_PASSWORD"]
    return (
        f"{settings['PREFECT_SERVER_DATABASE_DRIVER']}://{settings['PREFECT_SERVER_DATABASE_USER']}:{password}"
        f"@{settings['PREFECT_SERVER_DATABASE_HOST']}:{settings['PREFECT_SERVER_DATABASE_PORT']}"
        f"/{settings['PREFECT_SERVER_DATABASE_NAME']}"
    )


def api_url(settings: dict[str, str]) -> str:
    return f"http://{settings['PREFECT_SERVER_API_HOST']}:{settings['PREFECT_SERVER_API_PORT']}/api"


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as reply:
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
    """PostgreSQL and a Prefect server on it; returns the API URL. Idempotent."""
    settings = server_settings(ensure_env_file())
    url = api_url(settings)
    state = _state()
    state["postgres_started"] = postgres_up(settings) or state.get("postgres_started", False)
    _save_state(state)
    if healthy(url):
        return url
    prefect = Path(sys.executable).with_name("prefect")
    env = {**os.environ, **settings, "PREFECT_API_URL": url}
    with (STATE_DIR / "prefect-server.log").open("ab") as log:  # the server keeps its own descriptor
        server = subprocess.Popen(
            [str(prefect), "server", "start", "--host", settings["PREFECT_SERVER_API_HOST"],
             "--port", settings["PREFECT_SERVER_API_PORT"]],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    _SERVERS[server.pid] = server
    state["server_pid"] = server.pid
    _save_state(state)
    deadline = time.monotonic() + timeout_s
    while not healthy(url):
        if server.poll() is not None or time.monotonic() > deadline:
            tail = (STATE_DIR / "prefect-server.log").read_text()[-2000:]
            down()
            raise OmniError(f"prefect server did not come up at {url} ({database_url(settings)}):\n{tail}")
        time.sleep(0.5)
    return url


def down() -> list[str]:
    """Stop what :func:`up` started (the server's whole process group; the
    PostgreSQL cluster only if it was down before)."""
    state, stopped = _state(), []
    pid = state.pop("server_pid", None)
    if pid:
        child = _SERVERS.pop(pid, None)
        try:
            os.killpg(pid, signal.SIGTERM)
            for _ in range(100):
                if child is not None:
                    child.poll()  # reap it, or its zombie keeps the group alive
                os.killpg(pid, 0)
                time.sleep(0.1)
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if child is not None:
            child.wait(10)
        stopped.append(f"prefect server (pid {pid})")
    if state.pop("postgres_started", False):
        version, name, status = _cluster()
        if status == "online":
            _run(["pg_ctlcluster", version, name, "stop"])
            stopped.append(f"postgresql {version}/{name}")
    _save_state(state)
    return stopped


def status() -> dict[str, str]:
    settings = server_settings(read_env_file(ENV_FILE) if ENV_FILE.exists() else read_env_file(ENV_EXAMPLE))
    version, name, pg_status = _cluster()
    url = api_url(settings)
    return {
        "postgres": f"{version}/{name} {pg_status}",
        "database": database_url(settings),
        "prefect": f"{url} {'healthy' if healthy(url) else 'down'}",
    }
