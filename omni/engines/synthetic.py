"""The synthetic calibration engine: a real workload whose true cost is known.

It allocates and touches exactly ``mem_mb`` MiB of anonymous memory spread
over ``procs`` processes, "prefills" and "decodes" by burning a fixed number
of interpreter iterations per token, and can be told to crash, hang, exit
non-zero or leave a setsid'ed daemon behind. The harness is tested against it
exactly and in seconds; on a new host it calibrates what the harness itself
measures (memory accounting, CPU contention, noise).
"""

from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import platform
import subprocess
import sys
import time

from omni.cpulist import parse_cpulist
from omni.engines.common import TokenClock, fresh_prompts, prompts_digest, token_prompts
from omni.engines.protocol import hold_steady, log, mark_phase, serve

MIB = 1 << 20
VOCAB = 32000  # as omni's tiny models: prompts are token ids like the real engines' (their cost is not)
PAGE = mmap.PAGESIZE
# A build of the synthetic engine that is this many times slower per step
# (its work and its waits), as a fake engine env sets it in its vars: the
# versions a bisect walks over in a test, with a change planted in one.
SLOWDOWN_VAR = "OMNI_SYNTHETIC_SLOWDOWN"


def slowdown() -> float:
    text = os.environ.get(SLOWDOWN_VAR, "1")
    try:
        factor = float(text)
    except ValueError:
        raise SystemExit(f"{SLOWDOWN_VAR}={text!r} is no number; give a factor such as 1.2") from None
    if not factor > 0:
        raise SystemExit(f"{SLOWDOWN_VAR}={text!r}: give a factor > 0")
    return factor


def touch_anonymous(mb: float) -> mmap.mmap | None:
    """Map ``mb`` MiB of private anonymous memory and write every page.

    Writing one byte per page is what makes it resident: an untouched mapping
    costs no RssAnon at all.
    """
    size = int(mb * MIB)
    if size <= 0:
        return None
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for offset in range(0, size, PAGE):
        region[offset] = 1
    return region


def burn(iterations: int) -> int:
    """Spend CPU in the interpreter: a fixed amount of work, never a fixed time."""
    acc = 0
    for i in range(iterations):
        acc ^= i * 7
    return acc


def spawn_children(count: int, mb_each: float) -> list[subprocess.Popen]:
    children = []
    for _ in range(count):
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "omni.engines.synthetic", "--child", str(mb_each)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        )
    for child in children:
        if child.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"synthetic child {child.pid} died before allocating")
    return children


def run_child(mb: float) -> int:
    """A child process: hold ``mb`` MiB until the parent closes our stdin."""
    region = touch_anonymous(mb)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.read()  # EOF when the parent is done (or dies)
    del region
    return 0


def spawn_daemon() -> int:
    """Leave a process behind in a session of its own, as a careless engine would.

    It inherits OMNI_RUN_ID through the environment: that is how the
    orchestrator finds it after it has escaped the process tree.
    """
    daemon = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True: time.sleep(3600)"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    log(f"left daemon pid {daemon.pid} in its own session")
    return daemon.pid


# x86_64 and aarch64 syscall numbers: glibc has no wrapper for these (libnuma does)
_SYSCALLS = {
    "x86_64": {"set_mempolicy": 238, "migrate_pages": 256},
    "aarch64": {"set_mempolicy": 237, "migrate_pages": 238},
}
MPOL_DEFAULT = 0


def _syscall(name: str, *args) -> int:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise RuntimeError(f"escape: no {name} syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(numbers[name]), *args)
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name} failed: {os.strerror(errno)}")
    return result


def _nodemask(nodes: list[int]) -> ctypes.c_ulong:
    return ctypes.c_ulong(sum(1 << n for n in nodes))


def online_nodes() -> list[int]:
    try:
        with open("/sys/devices/system/node/online") as f:
            return parse_cpulist(f.read())
    except OSError:
        return [0]


def escape_binding(how: str, slot_nodes: list[int], mb: float) -> mmap.mmap | None:
    """Leave the slot's memory binding the way a misbehaving engine would, so
    the harness can be shown to catch it.

    ``reset_policy``: drop the policy numactl set (MPOL_DEFAULT) and touch new
    memory under it. ``migrate_pages``: move this process's pages from the
    slot's nodes to another node (needs a host with one).
    """
    if how == "reset_policy":
        _syscall("set_mempolicy", ctypes.c_int(MPOL_DEFAULT), None, ctypes.c_ulong(0))
        log("escape: memory policy reset to default")
        return touch_anonymous(max(mb, 1.0))
    others = sorted(set(online_nodes()) - set(slot_nodes))
    if not others:
        raise RuntimeError(
            f"escape=migrate_pages needs a NUMA node outside the slot's {slot_nodes}; this host has none"
        )
    old, new = _nodemask(slot_nodes), _nodemask(others[:1])
    left = _syscall(
        "migrate_pages", ctypes.c_int(os.getpid()), ctypes.c_ulong(64), ctypes.byref(old), ctypes.byref(new)
    )
    log(f"escape: migrated pages from nodes {slot_nodes} to node {others[0]} ({left} could not move)")
    return None


def generate(arm: dict, params: dict, prompts: list[list[int]], seen: set, short: bool = False) -> dict:
    """Prefill then decode, step by step, timed like a real engine: each
    token's time per sequence, each step's end (:class:`TokenClock`), and the
    times and counts of :mod:`omni.measure.iterations`.

    A step costs ``work_per_token`` for every sequence it gives a token and
    ``prefill_work_per_token`` for every prompt token it prefills. With
    ``prefill_chunk_tokens`` a step prefills at most that many prompt tokens,
    less one per sequence it decodes, as vLLM's scheduler fills
    ``max_num_batched_tokens`` (decodes first, then prefill chunks in order):
    the batch is then not decoded in lock step. Without it the first step
    prefills every prompt. A prompt in ``seen`` (prefilled before by this
    process) costs ``prefix_cache`` less prefill work, as on a cache hit;
    ``short``: the last sequence stops one token early."""
    targets = [arm["max_tokens"]] * len(prompts)
    if short:
        targets[-1] -= 1
    shares = [1 - params["prefix_cache"] if tuple(p) in seen else 1 for p in prompts]
    seen.update(tuple(p) for p in prompts)
    left = [len(p) for p in prompts]  # prompt tokens still to prefill
    produced = [0] * len(prompts)
    clock = TokenClock(len(prompts))
    first_token_s, steps = None, []
    while any(n < target for n, target in zip(produced, targets)):
        started = time.perf_counter()
        budget = params.get("prefill_chunk_tokens") or sum(left)
        served = [i for i, n in enumerate(produced) if not left[i] and 0 < n < targets[i]]
        budget -= len(served)
        work = 0.0
        for i in range(len(prompts)):
            if left[i] and budget > 0:
                take = min(left[i], budget)
                left[i], budget = left[i] - take, budget - take
                work += params["prefill_work_per_token"] * take * shares[i]
                served += [i] if not left[i] and targets[i] > 0 else []
        burn(int((work + params["work_per_token"] * len(served)) * params["slowdown"]))
        if params.get("step_sleep_ms"):
            # a step that waits, as on memory or a device
            time.sleep(params["step_sleep_ms"] * params["slowdown"] / 1000)
        now = clock.step((i, 1) for i in served)
        for i in served:
            produced[i] += 1
        if first_token_s is not None:
            steps.append(time.perf_counter() - started)
        elif all(n or not target for n, target in zip(produced, targets)):
            first_token_s = now
    if first_token_s is None:  # no sequence got a token: its "first" is the end of the prefill
        first_token_s = time.perf_counter() - clock.t0
    return {
        "ttft_s": first_token_s,
        "e2e_s": time.perf_counter() - clock.t0,
        "step_s": steps,
        "tokens": targets,
        **clock.raw(),
    }


def run(arm: dict) -> dict:
    params = {**arm["params"], "slowdown": slowdown()}
    procs = params["procs"]
    mb_each = params["mem_mb"] / procs
    mark_phase("load")
    t0 = time.perf_counter()
    children = spawn_children(procs - 1, mb_each)
    region = touch_anonymous(mb_each)
    time.sleep(params["load_s"])
    load_s = time.perf_counter() - t0
    if params["exit_code"]:
        log(f"exiting with code {params['exit_code']} as asked")
        sys.exit(params["exit_code"])
    daemon_pid = spawn_daemon() if params["daemonize"] else None
    escaped = escape_binding(params["escape"], arm["slot"]["mems"], mb_each) if params["escape"] != "none" else None
    if params["abort_at_exit"]:
        atexit.register(os.abort)  # like a C++ runtime dying in teardown
    mark_phase("loaded")
    log(f"loaded {params['mem_mb']} MiB over {procs} processes in {load_s:.3f} s")
    if params["crash"]:
        raise RuntimeError("synthetic engine crashed as asked (params.crash: true)")
    while params["hang"]:
        time.sleep(3600)
    seed = arm.get("prompt_seed", 0)
    prompts, fresh_batch = (
        f(arm["batch_size"], arm["prompt_len"], VOCAB, seed) for f in (token_prompts, fresh_prompts)
    )
    seen: set = set()  # the simulated prefix cache (params.prefix_cache)
    iterations = [
        generate(arm, params, prompts, seen, short=i == params.get("short_iteration"))
        for i in range(params["iterations"])
    ]
    fresh = generate(arm, params, fresh_batch, seen)  # the repeat audit's second first sight, in no metric
    hold_steady(params["hold_s"])
    for child in children:
        child.stdin.close()
        child.wait()
    del region, escaped
    time.sleep(params["teardown_s"])  # a real engine's shutdown, after its memory went
    return {
        "metrics": {"load_s": load_s},
        "iterations": iterations,
        "fresh": fresh,
        "config": {
            "procs": procs,
            "mem_mb_per_proc": mb_each,
            "daemon_pid": daemon_pid,
            "prompt_seed": seed,
            "prompts_sha256": prompts_digest(prompts),
        },
        "provenance": {
            "engine_version": "synthetic-1"
            + (f" (slowdown x{params['slowdown']:g})" if params["slowdown"] != 1 else "")
        },
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(run_child(float(sys.argv[2])))
    sys.exit(serve(run))
