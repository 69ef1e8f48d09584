"""Prefect's temporary API server for a sweep run in this process, started
as the command begins so that it boots while omni loads and plans the sweep.

With no API URL configured, Prefect starts this server itself when the first
flow begins (``prefect.server.api.server.SubprocessASGIServer``): the client
imports the whole server package only to reach that class (2.9 s here), then
waits for the subprocess to import it again (3.2 s more). Started here, the
server's 3 s overlap omni's own imports on the other core, and the client,
pointed at it through ``PREFECT_API_URL``, never imports the server. The
command line and environment are Prefect's own (its SQLite database under
``PREFECT_HOME``, no UI, the ephemeral set of services), so the flow runs,
logs and artifacts are the same; Prefect's ``PREFECT_SERVER_EPHEMERAL_*``
settings still apply.

The server dies with this process: stopped at exit, and sent SIGTERM by the
kernel should this process die first (``PR_SET_PDEATHSIG``). That signal
follows the thread that started the server, so start it from the main thread
(a run's engine is started from a worker thread; omni.run.reaper handles those).
"""

from __future__ import annotations

import atexit
import ctypes
import http.client
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child calls it between fork and exec
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PORT_TAKEN = 3  # uvicorn's exit code when it cannot bind its port (another process took it meanwhile)
STOP_WAIT_S = 5.0
POLL_S = 0.05


class EphemeralServer:
    """The uvicorn process of Prefect's API on a free local port."""

    def __init__(self) -> None:
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.connected = False

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def launch(self) -> None:
        self.port = free_port()
        # the same command and environment as Prefect's SubprocessASGIServer
        prefect_dir = Path(importlib.util.find_spec("prefect").origin).parent
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            str(prefect_dir.parent),
            "--factory",
            "prefect.server.api.server:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "error",
            "--lifespan",
            "on",
        ]
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
        parent = os.getpid()
        self.process = subprocess.Popen(argv, env=env, preexec_fn=lambda: die_with(parent))

    def connect(self) -> bool:
        """Wait until the server answers, then point this process's Prefect at
        it; False when the user's own API URL (profile, prefect.toml, .env) or
        ephemeral mode turned off says otherwise: the server is stopped and
        Prefect does as told."""
        if self.connected:
            return True
        from prefect.context import refresh_global_settings_context
        from prefect.settings import get_current_settings

        settings = get_current_settings()
        if settings.api.url or not settings.server.ephemeral.enabled:
            self.stop()
            return False
        preload_flow_modules()
        self.wait_healthy(settings.server.ephemeral.startup_timeout_seconds)
        os.environ["PREFECT_API_URL"] = self.api_url
        os.environ.setdefault("PREFECT_UI_URL", "")  # it serves no UI: no "View at" link to one
        # Prefect read its settings when it was imported; threads it starts later read them from there
        refresh_global_settings_context()
        self.connected = True
        return True

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.process.poll()
            if code == PORT_TAKEN:
                self.launch()
            elif code is not None:
                raise RuntimeError(f"the ephemeral Prefect API server exited with code {code} before it answered")
            elif answers(self.port, "/api/health"):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"Timed out while attempting to connect to ephemeral Prefect API server: no answer within "
                    f"{timeout_s:g} s (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)"
                )
            time.sleep(POLL_S)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


SERVER: EphemeralServer | None = None


def start_ephemeral_server() -> EphemeralServer | None:
    """Prefect's temporary server, booting: run flows inside :func:`prefect_api`.
    None when ``PREFECT_API_URL`` names a server already. One per process:
    a later call returns the first server (None if it was not wanted)."""
    global SERVER
    if SERVER is not None:
        return SERVER if SERVER.process is not None else None
    if os.environ.get("PREFECT_API_URL"):
        return None
    SERVER = EphemeralServer()
    SERVER.launch()
    atexit.register(SERVER.stop)  # registered before Prefect's own handlers, so it runs after they flush
    return SERVER


@contextmanager
def prefect_api(server: EphemeralServer | None) -> Iterator[None]:
    """Flows run inside on ``server`` once it answers; on what the user set
    up when None (or when their settings name another server).

    Without flow run heartbeats there: they let a server tell a crashed flow
    run from a long one, but this server dies with the flow's process, and
    their thread costs the flow up to a second at its end (it sleeps in steps
    of 1 s and is joined)."""
    if server is None or not server.connect():
        yield
        return
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def temporary_api_url() -> str | None:
    """The API URL of the server started here, while this process uses it."""
    return SERVER.api_url if SERVER is not None and SERVER.connected else None


def preload_flow_modules() -> None:
    """What a flow run imports on first use (Prefect's engines, FastAPI's
    encoder for its parameters, matplotlib for the report), imported while the
    server boots: the wait would idle this core."""
    import fastapi.encoders  # noqa: F401
    import prefect.flow_engine  # noqa: F401
    import prefect.task_engine  # noqa: F401

    from omni.report.html import preload

    preload()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(port: int, path: str) -> bool:
    """GET 127.0.0.1:port/path is 200 (http.client: no proxy from the environment is asked)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):  # refused while it boots
        return False
    finally:
        connection.close()


def die_with(parent: int) -> None:
    """In the child, before exec: SIGTERM when the thread that started us
    dies; at once if the parent is gone already (it died before the prctl)."""
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)
