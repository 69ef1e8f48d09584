"""llama-server for a serving arm: its command line, set from the arm as
:mod:`omni.engines.llamacpp` sets the offline engine's context, so a served
and an offline llama.cpp arm of one config run the same model the same way.
"""

from __future__ import annotations

from omni.engines.llamacpp import n_batch
from omni.models.factory import served_chat_template


def http_threads(arm: dict) -> int:
    """llama-server's fixed HTTP threads: one per request a level keeps in
    flight (32 at least, for open-loop levels), and 4 for /health, /metrics
    and the warm-up. A connection beyond them gets a thread that closes it
    after one request, and a client that reuses it fails writing its next
    request ("Can not write request body")."""
    load = arm.get("load") or {}
    return max([*load.get("concurrency", []), arm["batch_size"], 32]) + 4


def server_flags(arm: dict) -> list[str]:
    """llama-server's flags for a serving arm, set as :func:`omni.engines.llamacpp.new_context` sets
    the offline engine's context: ``batch_size`` sequences (slots) of
    ``context_len`` each, the same batch sizes and threads, mmap and repack
    as the arm says, its prompt cache as ``prefix_caching`` says
    (:func:`prompt_cache_flags`), a chat template where the model's files
    have none (:func:`chat_template_flags`), Prometheus metrics on, no web UI."""
    params, batch = arm["params"], arm["batch_size"]
    per_seq = arm.get("context_len") or arm["prompt_len"] + arm["max_tokens"]
    threads = str(arm["threads_effective"])
    flags = [
        "--model",
        arm["model_path"],
        "--host",
        arm["serve"]["host"],
        "--port",
        str(arm["serve"]["port"]),
        "--alias",
        arm["name"],
        "--threads",
        threads,
        "--threads-batch",
        threads,
        "--ctx-size",
        str(batch * per_seq),
        "--parallel",
        str(batch),
        "--batch-size",
        str(n_batch(arm)),
        "--ubatch-size",
        str(n_batch(arm)),
        "--threads-http",
        str(http_threads(arm)),
        "--metrics",
        "--no-webui",
        *prompt_cache_flags(params.get("prefix_caching", False)),
        "--load-mode",
        "mmap" if params["mmap"] else "none",  # as set_load_mode sets it
    ]
    if not params["repack"]:
        flags.append("--no-repack")
    return flags + chat_template_flags(arm)


def prompt_cache_flags(on: bool) -> list[str]:
    """llama-server's prompt cache, as vLLM's prefix caching: on, a request
    reuses the KV its slot holds of the prompt they share (the slot's last
    request's: a shared prefix), and prefills the rest (``--cache-prompt``);
    off, it prefills every token (``--no-cache-prompt``). Its host-memory
    prompt cache is off either way (``--cache-ram 0``, which also stops
    ``--cache-idle-slots``): by default, as each request arrives, it copies
    the idle slots' KV into up to 8 GiB of RAM and may copy one back into
    the slot it picks, with the prompt cache off too, where that KV is then
    prefilled over. vLLM's cache is its KV pool; llama-server's is then its
    slots', and its memory is theirs (llama.cpp tools/server/server-context.cpp,
    get_available_slot and the cache_idle_slots loop)."""
    return ["--cache-prompt" if on else "--no-cache-prompt", "--cache-ram", "0"]


def chat_template_flags(arm: dict) -> list[str]:
    """A chat arm on a factory model: the factory's chat template, which its
    files lack (omni.models.factory.CHAT_TEMPLATE), through llama.cpp's Jinja
    engine; another model's GGUF brings its own."""
    template = served_chat_template(arm)
    return ["--jinja", "--chat-template", template] if template else []
