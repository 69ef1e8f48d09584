"""A serving arm's prompts: its prompts file (``load.prompts``), a JSONL
found beside the spec and checked line by line when the spec is read, and
the arm's own lengths checked against the prompts they describe.

A line is one JSON object, the custom dataset's of ``vllm bench serve``::

    {"prompt": "the request's text", "output_tokens": 64}

``output_tokens`` is on every line (each request asks its own) or on none
(each asks the arm's ``max_tokens``): the load generator takes one or the
other for the whole file (``--custom-output-len``). Any other key is
refused: a misspelt ``output_token`` would otherwise be ignored and every
request would ask ``max_tokens``. ``python -m omni.models.prompts`` writes
such a file in a factory model's own words.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni.spec.problems import Problem, problem, validation_error

SUFFIX = ".jsonl"  # vllm bench serve's custom dataset reads no other (CustomDataset.load_data)
LINE_KEYS = ("prompt", "output_tokens")
EXAMPLE = '{"prompt": "...", "output_tokens": 64}'


@dataclass(frozen=True)
class PromptsFile:
    path: Path
    sha256: str  # of its bytes: the workload's identity
    prompts: int  # lines
    output_tokens: bool  # every line gives its answer's length


def read_prompts_file(path: Path) -> PromptsFile:
    """The file's facts, or ValueError saying what is wrong, where (its line)
    and what to do."""
    if path.suffix != SUFFIX:
        raise ValueError(f"{path}: the load generator reads a prompts file only by a {SUFFIX} name; rename it")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(
            f"{path}: no such file (a relative path is the spec file's folder's); fix the path, or write "
            f"one: python -m omni.models.prompts {path.name}"
        ) from None
    except OSError as err:
        raise ValueError(f"{path}: cannot read: {err.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (bad byte at offset {err.start})") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the last line's newline
    if not lines:
        raise ValueError(f"{path}: holds no prompts; write one JSON object a line: {EXAMPLE}")
    given = [_check_line(path, number, line) for number, line in enumerate(lines, 1)]
    if any(given) and not all(given):
        number = given.index(not given[0]) + 1
        has, lacks = (1, number) if given[0] else (number, 1)
        raise ValueError(
            f"{path}:{lacks}: no output_tokens, while line {has} gives one: give every line output_tokens "
            "(each request asks its own) or none (each asks the arm's max_tokens)"
        )
    return PromptsFile(path, hashlib.sha256(raw).hexdigest(), len(lines), all(given))


def _check_line(path: Path, number: int, line: str) -> bool:
    """One line checked; whether it gives output_tokens."""
    where = f"{path}:{number}"
    if not line.strip():
        raise ValueError(f"{where}: a blank line; write one JSON object a line, no blank lines")
    try:
        item = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not JSON: {err.msg} (column {err.colno}); a line is {EXAMPLE}") from None
    if not isinstance(item, dict):
        raise ValueError(f"{where}: a {type(item).__name__}, not an object; a line is {EXAMPLE}")
    if unknown := [key for key in item if key not in LINE_KEYS]:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; a line holds prompt and output_tokens"
        )
    prompt = item.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        got = "none" if "prompt" not in item else repr(prompt)[:40]
        raise ValueError(f'{where}: "prompt" must be the request\'s text, not empty; got {got}')
    if "output_tokens" not in item:
        return False
    tokens = item["output_tokens"]
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f'{where}: "output_tokens" must be a whole number >= 1 (the answer\'s tokens), got {tokens!r}')
    return True


def prompts_path(value: str, context: dict | None) -> str:
    """The file's absolute path: a relative one is the spec file's folder's
    (``spec_dir`` of the validation context; without one, the working directory's)."""
    if Path(value).suffix != SUFFIX:
        raise problem(f"{value!r}: the load generator reads a prompts file only by a {SUFFIX} name")
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = Path((context or {}).get("spec_dir") or Path.cwd()) / path
    return str(path.resolve())


def checked_prompts_file(path: Path, requests: int) -> PromptsFile:
    """:func:`read_prompts_file`, and enough lines for a level's requests;
    a problem at ``prompts`` otherwise."""
    try:
        found = read_prompts_file(path)
    except ValueError as err:
        raise validation_error("LoadRequest", [(("prompts",), str(err))]) from None
    if found.prompts < requests:
        text = (
            f"{path} holds {found.prompts} prompts and a level measures {requests} requests: give at least "
            f"{requests} lines, or fewer requests (the load generator would send repeats, which a prefix cache "
            "answers from its cache)"
        )
        raise validation_error("LoadRequest", [(("prompts",), text)])
    return found


# ``arm`` below: an omni.spec.arm.Arm, whose validator calls these (that module imports this one)


def random_prompt_problems(arm: Any) -> list[Problem]:
    """Random prompts: prompt_len is each whole prompt, the shared prefix included."""
    prefix = arm.load.prefix_len
    if prefix < arm.prompt_len:
        return []
    return [
        (
            ("load", "prefix_len"),
            f"prefix_len {prefix} must be below prompt_len {arm.prompt_len}: prompt_len is each request's whole "
            "prompt, the shared prefix included, and a request needs a token of its own after it",
        )
    ]


def prompts_file_problems(arm: Any) -> list[Problem]:
    """A prompts file sets each request's prompt (and, where its lines say,
    its answer's length): the arm's own lengths would contradict it."""
    load, problems = arm.load, []
    if "prompt_len" in arm.model_fields_set:
        problems.append(
            (
                ("prompt_len",),
                "the prompts file (load.prompts) sets each prompt: drop prompt_len (context_len sizes the server)",
            )
        )
    if arm.context_len is None:
        problems.append(
            (
                ("load", "prompts"),
                "a prompts arm needs context_len: the server's context per sequence, at least the file's longest "
                "prompt and its answer (the server refuses a longer request, and it fails)",
            )
        )
    if load.prefix_len:
        problems.append(
            (
                ("load", "prefix_len"),
                "prefix_len draws a shared prefix for random prompts; a prompts file carries its own: begin each "
                "prompt with it (python -m omni.models.prompts --prefix-len N writes such a file)",
            )
        )
    if load.range_ratio:
        problems.append(
            (
                ("load", "range_ratio"),
                "range_ratio spreads random prompts' lengths; the prompts file sets them: drop it",
            )
        )
    if load.prompts_output_tokens and "max_tokens" in arm.model_fields_set:
        problems.append(
            (
                ("max_tokens",),
                "every line of the prompts file gives its answer's length (output_tokens): drop max_tokens, or "
                "drop output_tokens from every line for each request to ask max_tokens",
            )
        )
    if load.prompts_output_tokens and arm.engine == "llamacpp" and load.endpoint == "completions":
        problems.append(
            (
                ("load", "prompts"),
                "llama-server's completions stream leaves the client to count output tokens from the text (its "
                "count is in a chunk the client skips), which random weights' byte tokens put off by one, and omni "
                "sets a count right only where every request asked max_tokens: use endpoint: chat (its stream "
                "gives the count) or a file without output_tokens",
            )
        )
    return problems
