import os
import signal
import subprocess
import sys
import time

from omni.run.reaper import RUN_ID_VAR, find_run_processes, reap_run
from tests.conftest import reap_budget_s, run_env

DAEMON = (
    "import subprocess, sys, time\n"
    "d = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'],"
    " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print(d.pid, flush=True)\n"
)


def wait_gone(run_id: str, limit: float = 10.0) -> set[int]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        left = find_run_processes(run_id)
        if not left:
            return left
        time.sleep(0.1)
    return find_run_processes(run_id)


def test_reap_kills_a_setsid_daemon(run_id):
    out = subprocess.run([sys.executable, "-c", DAEMON], env=run_env(run_id), capture_output=True, check=True)
    daemon = int(out.stdout)
    assert daemon in find_run_processes(run_id)
    signalled = reap_run(run_id, grace_s=1)
    assert daemon in signalled
    assert wait_gone(run_id) == set()


def test_reap_escalates_to_sigkill(run_id):
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('up', flush=True)\nwhile True: time.sleep(1)",
        ],
        env=run_env(run_id),
        stdout=subprocess.PIPE,
    )
    stubborn.stdout.readline()
    stubborn.stdout.close()
    t0 = time.monotonic()
    reap_run(run_id, grace_s=0.5)
    assert stubborn.wait(timeout=5) == -signal.SIGKILL
    assert time.monotonic() - t0 < reap_budget_s(grace_s=0.5)


def test_watchdog_reaps_when_the_orchestrator_dies(run_id):
    # A stand-in orchestrator: opens a watchdog, starts a daemon with the run id, then is SIGKILLed.
    orchestrator = (
        "import os, subprocess, sys, time\n"
        "from omni.run.reaper import Watchdog\n"
        f"w = Watchdog({run_id!r}).__enter__()\n"
        f"env = dict(os.environ, {RUN_ID_VAR}={run_id!r})\n"
        "d = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'],"
        " start_new_session=True, env=env, stdout=subprocess.DEVNULL)\n"
        "print(d.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", orchestrator], stdout=subprocess.PIPE)
    daemon = int(proc.stdout.readline())
    proc.stdout.close()
    assert daemon in find_run_processes(run_id)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert wait_gone(run_id) == set()


def test_stop_group_ends_a_group_that_obeys_and_kills_one_that_does_not_only_when_asked() -> None:
    import subprocess

    from omni.run.reaper import stop_group

    # obeys SIGTERM: a shell and its sleeping child end within the grace
    obeys = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    assert stop_group(obeys.pid, 30.0, obeys) is True
    assert obeys.returncode is not None

    # a member ignores SIGTERM: without kill it is left to the caller, with kill it goes
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)",
        ],
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    stubborn.stdout.readline()  # its handler is set
    assert stop_group(stubborn.pid, 0.3, stubborn, kill=False) is False
    assert stubborn.poll() is None
    assert stop_group(stubborn.pid, 0.3, stubborn) is True
    assert stubborn.returncode == -signal.SIGKILL
    stubborn.stdout.close()
