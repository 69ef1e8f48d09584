"""Boot a two-node QEMU guest over this machine's own root filesystem and run
tests/numa_vm/guest.py in it (virtme-ng; Debian's qemu-system-x86,
linux-image-amd64 and busybox-static, installed by scripts/bootstrap.sh).

    python -m tests.numa_vm.boot OUT_DIR [--capture]

The guest has 2 CPUs and 4 GiB: node 0 = CPU 0 + 2 GiB, node 1 = CPU 1 +
2 GiB, distances 10/20. The root filesystem is the host's, read-only; only
OUT_DIR is writable. It runs under TCG (software emulation): /dev/kvm exists
on these hosts, but a KVM guest dies at boot (``failed to set MSR 0x10a``)
or hangs (nested virtualisation).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
PACKAGES = "qemu-system-x86 linux-image-amd64 busybox-static (Debian) and virtme-ng (PyPI)"


def guest_kernel() -> Path | None:
    """The newest Debian kernel image in /boot (linux-image-amd64)."""
    images = sorted(Path("/boot").glob("vmlinuz-*"), key=lambda p: p.stat().st_mtime)
    return images[-1] if images else None


def missing_tools() -> list[str]:
    missing = []
    if not (VENV_BIN / "vng").exists() and not shutil.which("vng"):
        missing.append("vng (pip install virtme-ng)")
    if not shutil.which("qemu-system-x86_64"):
        missing.append("qemu-system-x86_64 (apt-get install qemu-system-x86)")
    if guest_kernel() is None:
        missing.append("a kernel in /boot (apt-get install linux-image-amd64)")
    if not shutil.which("busybox"):
        missing.append("busybox (apt-get install busybox-static)")
    return missing


def vng_argv(out: Path, command: str) -> list[str]:
    vng = str(VENV_BIN / "vng") if (VENV_BIN / "vng").exists() else "vng"
    return [
        vng,
        "--run",
        str(guest_kernel()),
        "--disable-kvm",
        "--cpus",
        "2",
        "--memory",
        "4G",
        "--numa",
        "2G,cpus=0",
        "--numa",
        "2G,cpus=1",
        "--rwdir",
        str(out),
        "--exec",
        command,
    ]


def boot(out: Path, capture: bool = False, timeout_s: float = 780) -> dict:
    """Run the guest script; return timings. Raises with the guest's log on failure."""
    missing = missing_tools()
    if missing:
        raise RuntimeError(f"the two-node guest needs {', '.join(missing)}: run make bootstrap (installs {PACKAGES})")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    # The guest cannot write the host's tree: compile omni's bytecode here, or
    # every guest process would recompile it (tens of seconds under TCG).
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO / "omni"), str(REPO / "tests" / "numa_vm")], check=True
    )
    guest_cmd = f"cd {REPO} && {sys.executable} tests/numa_vm/guest.py {out}" + (" --capture" if capture else "")
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}  # vng runs virtme-run from there
    started = time.monotonic()
    log = out / "guest.log"
    with open(log, "w") as sink:
        # own session: on a timeout, QEMU (vng's child) goes down with vng
        guest = subprocess.Popen(
            vng_argv(out, guest_cmd),
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code = guest.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(guest.pid, signal.SIGKILL)
            guest.wait()
            code = f"killed after the {timeout_s:g} s timeout"
    wall = time.monotonic() - started
    if code != 0 or not (out / "report.json").exists():
        raise RuntimeError(f"guest failed (exit {code}) after {wall:.0f} s; log {log}:\n{log.read_text()[-4000:]}")
    return {"wall_s": wall}


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "results/numa-vm")
    result = boot(out, capture="--capture" in sys.argv)
    print(f"guest ran in {result['wall_s']:.0f} s; report {out / 'report.json'}, log {out / 'guest.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
