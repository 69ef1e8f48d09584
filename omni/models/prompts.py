"""Request mixes for serving arms: a JSONL of prompts in a factory model's own
words, of varied lengths, the same bytes from the same arguments.

A line is what ``vllm bench serve``'s custom dataset reads and a serving
arm's ``load.prompts`` names (omni.spec.prompts checks it)::

    {"prompt": "丁 七 丈 ...", "output_tokens": 37}

Each word is one token of the preset's vocabulary (``▁`` and a character,
:func:`omni.models.factory.word`), written as its tokenizer decodes it: a
prompt of n words is n tokens to the load generator's HF tokenizer and to
llama.cpp's alike, so the servers are sent the lengths drawn here. Prompt
lengths are drawn log-uniformly between ``min_len`` and ``max_len`` (many
short prompts, a few long ones, as chat traffic has them); every prompt
begins with the same ``prefix_len`` words (a shared system prompt, which a
prefix cache can serve), and the lengths count them; each answer's length
is drawn uniformly from ``output_len``, or left out (each request then asks
the arm's ``max_tokens``)::

    python -m omni.models.prompts arms/serve-mix.jsonl --count 64 --min-len 160 \\
        --max-len 448 --prefix-len 128 --output-len 16-64 --seed 0
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from pathlib import Path

from omni.models.factory import N_BYTES, N_SPECIAL, PRESETS, vocabulary


def mix_prompts(
    preset: str = "tiny-llama",
    count: int = 64,
    min_len: int = 32,
    max_len: int = 512,
    prefix_len: int = 0,
    output_len: tuple[int, int] | None = (16, 64),
    seed: int = 0,
) -> list[dict]:
    """``count`` lines of :func:`write_prompts`, drawn from ``seed``."""
    if not 0 <= prefix_len < min_len <= max_len:
        raise ValueError(
            f"need 0 <= prefix_len < min_len <= max_len (a prompt holds the prefix and a word of its own), "
            f"got {prefix_len}, {min_len}, {max_len}"
        )
    if output_len is not None and not 1 <= output_len[0] <= output_len[1]:
        raise ValueError(f"need 1 <= the shortest answer <= the longest, got {output_len[0]}-{output_len[1]}")
    words = [token[1:] for token in vocabulary(PRESETS[preset])[N_SPECIAL + N_BYTES :]]  # "▁X" decodes to "X"
    rng = random.Random(f"omni-prompts:{preset}:{seed}")
    prefix = [rng.choice(words) for _ in range(prefix_len)]
    lines = []
    for _ in range(count):
        length = round(math.exp(rng.uniform(math.log(min_len), math.log(max_len))))
        line = {"prompt": " ".join(prefix + [rng.choice(words) for _ in range(length - prefix_len)])}
        if output_len is not None:
            line["output_tokens"] = rng.randint(*output_len)
        lines.append(line)
    return lines


def write_prompts(path: Path, lines: list[dict]) -> None:
    """One JSON object a line, UTF-8, written whole or not at all."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    os.replace(tmp, path)


def output_range(text: str) -> tuple[int, int] | None:
    """``16-64`` -> (16, 64), ``32`` -> (32, 32), ``none`` -> None."""
    if text == "none":
        return None
    low, _, high = text.partition("-")
    try:
        return int(low), int(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give MIN-MAX (16-64), one length (32) or none") from None


def main(argv: list[str] | None = None) -> str:
    """The command line above; what it wrote."""
    parser = argparse.ArgumentParser(description="omni: write a request mix (JSONL) in a factory model's words")
    parser.add_argument("out", type=Path, help="the .jsonl file to write")
    parser.add_argument("--preset", default="tiny-llama", choices=sorted(PRESETS))
    parser.add_argument("--count", type=int, default=64, help="prompts (lines)")
    parser.add_argument("--min-len", type=int, default=32, help="shortest prompt, tokens, the prefix included")
    parser.add_argument("--max-len", type=int, default=512, help="longest prompt, tokens")
    parser.add_argument("--prefix-len", type=int, default=0, help="tokens every prompt begins with")
    parser.add_argument("--output-len", type=output_range, default=(16, 64), help="answer lengths: MIN-MAX, N, or none")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        lines = mix_prompts(
            args.preset, args.count, args.min_len, args.max_len, args.prefix_len, args.output_len, args.seed
        )
    except ValueError as err:
        parser.error(str(err))
    write_prompts(args.out, lines)
    return f"{args.out}: {len(lines)} prompts"


if __name__ == "__main__":
    print(main())
