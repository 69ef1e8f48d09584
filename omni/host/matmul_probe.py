"""Peak matmul throughput per dtype, measured with torch inside an engine env.

Runs as ``python -m omni.host.matmul_probe THREADS N REPEATS`` with the vLLM
env's interpreter, bound to the slot by the caller: torch dispatches fp32
and bf16 matmuls to oneDNN (mkldnn) or its BLAS and int8 ``_int_mm`` to
oneDNN's VNNI/AMX kernels, the libraries vLLM's CPU backend calls, so the
roof is one that engine can reach. A square N x N x N product, 2 N^3 FLOPs
(int8: operations) per call, one warm-up, then REPEATS timed calls. Prints
one JSON object: per dtype the rates in FLOP/s, or why it could not run.

Engine side: the standard library and torch only.
"""

from __future__ import annotations

import json
import sys
import time

DTYPES = ("fp32", "bf16", "int8")


def operands(torch, dtype: str, n: int):
    generator = torch.Generator().manual_seed(0)
    if dtype == "int8":
        a = torch.randint(-64, 64, (n, n), dtype=torch.int8, generator=generator)
        b = torch.randint(-64, 64, (n, n), dtype=torch.int8, generator=generator)
        return lambda: torch._int_mm(a, b)
    kind = torch.float32 if dtype == "fp32" else torch.bfloat16
    a = torch.randn(n, n, generator=generator).to(kind)
    b = torch.randn(n, n, generator=generator).to(kind)
    return lambda: torch.mm(a, b)


def measure(torch, dtype: str, n: int, repeats: int) -> dict:
    try:
        call = operands(torch, dtype, n)
        call()
    except (RuntimeError, NotImplementedError) as e:  # e.g. no int8 kernel on this CPU
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        rates.append(2.0 * n**3 / (time.perf_counter() - start))
    return {"flop_s": rates}


def main(argv: list[str]) -> None:
    threads, n, repeats = (int(a) for a in argv)
    import torch

    torch.set_num_threads(threads)
    out = {
        "library": f"torch {torch.__version__}",
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
        "threads": torch.get_num_threads(),
        "n": n,
        "dtypes": {dtype: measure(torch, dtype, n, repeats) for dtype in DTYPES},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
