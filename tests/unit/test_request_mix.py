"""Request mixes of serving arms without a server: a shared prefix, a prompts
file, the chat endpoint, and the prefix cache on both servers; the flags
they give the load generator and the servers, the spec's checks of them,
and the factory's prompts writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni.engines.llama_server import server_flags as llama_server_flags
from omni.engines.vllm_server import server_argv as vllm_server_argv
from omni.errors import SpecError
from omni.models.factory import CHAT_TEMPLATE, N_BYTES, N_SPECIAL, PRESETS, vocabulary
from omni.models.prompts import mix_prompts, output_range, write_prompts
from omni.serving.levels import Level, client_flags, reconcile_output_tokens
from omni.serving.server_metrics import parse_metrics, server_prompt_tokens
from omni.spec import arm_hash, canonical_arm_json, load_spec, validate_sweep

REPO = Path(__file__).resolve().parents[2]
SLO = {"ttft_ms": 2000.0, "tpot_ms": 100.0, "percentile": 99}
LOAD = {"range_ratio": 0.0, "requests": 16, "warmup": 2, "seed": 3, "burstiness": 1.0, "slo": SLO}
COMMON = {"model": "m", "tokenizer": "/t", "base_url": "http://h:1"}


def after(flags: list[str], name: str) -> str:
    return flags[flags.index(name) + 1]


# --- the load generator's flags ---


def test_the_default_request_is_random_prompts_to_completions_with_no_prefix():
    flags = client_flags(Level("concurrency", 4), LOAD, prompt_len=128, max_tokens=64, **COMMON)
    assert (after(flags, "--backend"), after(flags, "--endpoint")) == ("openai", "/v1/completions")
    assert after(flags, "--dataset-name") == "random" and after(flags, "--random-input-len") == "128"
    assert "--random-prefix-len" not in flags and "--skip-chat-template" not in flags


def test_a_shared_prefix_is_part_of_prompt_len_and_the_chat_endpoint_its_backend():
    load = {**LOAD, "endpoint": "chat", "prefix_len": 96, "range_ratio": 0.2}
    flags = client_flags(Level("rate", 2.0), load, prompt_len=128, max_tokens=64, **COMMON)
    assert (after(flags, "--backend"), after(flags, "--endpoint")) == ("openai-chat", "/v1/chat/completions")
    # vllm bench serve draws --random-input-len after the prefix: the two make the arm's prompt_len
    assert (after(flags, "--random-prefix-len"), after(flags, "--random-input-len")) == ("96", "32")
    assert after(flags, "--random-range-ratio") == "0.2"


@pytest.mark.parametrize(("from_file", "output"), [(True, "-1"), (False, "64")])
def test_a_prompts_file_is_the_custom_dataset_its_prompts_sent_as_written(from_file, output):
    load = {**LOAD, "prompts": "/abs/mix.jsonl", "prompts_output_tokens": from_file}
    flags = client_flags(Level("concurrency", 1), load, prompt_len=128, max_tokens=64, **COMMON)
    assert (after(flags, "--dataset-name"), after(flags, "--dataset-path")) == ("custom", "/abs/mix.jsonl")
    assert after(flags, "--custom-output-len") == output  # -1: each line's output_tokens
    assert "--skip-chat-template" in flags and "--random-input-len" not in flags


# --- the spec ---


def serving_spec(tmp_path: Path, load: str, arm: str = "", folder: str = "specs") -> Path:
    spec = tmp_path / folder / "mix.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    lines = ["name: mix", "slots: {cores: 1, client_cores: 1}", "arms:", "  - name: a", "    engine: vllm"]
    lines += ["    model: tiny-llama", "    context_len: 512", *(f"    {line}" for line in arm.splitlines())]
    spec.write_text("\n".join([*lines, f"    load: {{concurrency: [1], requests: 4, {load}}}", ""]))
    return spec


def prompts_file(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


GOOD = [json.dumps({"prompt": f"丁 七 {i}", "output_tokens": 4 + i}, ensure_ascii=False) for i in range(4)]


def test_a_prompts_path_is_the_spec_files_folders_and_the_arm_is_its_content(tmp_path, monkeypatch):
    prompts_file(tmp_path / "specs" / "data" / "mix.jsonl", GOOD)
    monkeypatch.chdir(tmp_path)  # not the spec's folder: the path is still found
    arm = load_spec(serving_spec(tmp_path, "prompts: data/mix.jsonl")).sweep.arms[0]
    assert arm.load.prompts == str(tmp_path / "specs" / "data" / "mix.jsonl")
    assert arm.load.prompts_output_tokens
    identity = json.loads(canonical_arm_json(arm))["load"]
    assert identity["prompts"] == f"sha256:{arm.load.prompts_sha256}"  # the digest, not the path
    # the same mix elsewhere is the same arm; an edited one is another
    prompts_file(tmp_path / "elsewhere" / "mix.jsonl", GOOD)
    moved = load_spec(serving_spec(tmp_path, f"prompts: {tmp_path}/elsewhere/mix.jsonl", folder="b")).sweep.arms[0]
    assert arm_hash(moved) == arm_hash(arm)
    prompts_file(tmp_path / "elsewhere" / "mix.jsonl", [*GOOD, GOOD[0]])
    edited = load_spec(serving_spec(tmp_path, f"prompts: {tmp_path}/elsewhere/mix.jsonl", folder="b")).sweep.arms[0]
    assert arm_hash(edited) != arm_hash(arm)


def test_a_spec_copy_reads_its_prompts_where_its_original_lay_or_not_at_all(tmp_path):
    prompts_file(tmp_path / "specs" / "mix.jsonl", GOOD)
    original = serving_spec(tmp_path, "prompts: mix.jsonl")
    copy = tmp_path / "results" / "sweeps" / "x" / "spec.yaml"
    copy.parent.mkdir(parents=True)
    copy.write_text(original.read_text())
    with pytest.raises(SpecError, match="no such file"):
        load_spec(copy)
    assert load_spec(copy, base=original.parent).sweep.arms[0].load.prompts_sha256
    assert load_spec(copy, read_files=False).sweep.arms[0].load.prompts_sha256 is None


def test_the_request_mix_fields_at_their_defaults_leave_an_arms_identity_as_it_was():
    arm = {"name": "s", "engine": "llamacpp", "model": "tiny-llama", "load": {"concurrency": [1], "requests": 4}}
    sweep = validate_sweep({"name": "x", "slots": {"cores": 1, "client_cores": 1}, "arms": [arm]})
    fields = json.loads(canonical_arm_json(sweep.arms[0]))
    assert not {"endpoint", "prefix_len", "prompts"} & set(fields["load"])
    assert "prefix_caching" not in fields["params"]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (None, r"mix\.jsonl: no such file .* python -m omni\.models\.prompts mix\.jsonl"),
        ([], "holds no prompts"),
        ([GOOD[0], "", GOOD[1]], r"mix\.jsonl:2: a blank line"),
        ([GOOD[0], '{"prompt": "a",}'], r"mix\.jsonl:2: not JSON: .*column"),
        (['["a"]'], r"mix\.jsonl:1: a list, not an object"),
        (['{"prompt": "a", "output_token": 3}'], r"mix\.jsonl:1: unknown key\(s\) 'output_token'"),
        (['{"prompt": ""}'], r"mix\.jsonl:1: \"prompt\" must be the request's text"),
        (['{"output_tokens": 3}'], r"mix\.jsonl:1: \"prompt\" must be .*got none"),
        (['{"prompt": "a", "output_tokens": 0}'], r"\"output_tokens\" must be a whole number >= 1"),
        (['{"prompt": "a", "output_tokens": true}'], r"\"output_tokens\" must be a whole number >= 1"),
        (['{"prompt": "a", "output_tokens": "ten"}'], r"\"output_tokens\" must be a whole number >= 1"),
        ([GOOD[0], GOOD[1], '{"prompt": "a"}'], r"mix\.jsonl:3: no output_tokens, while line 1 gives one"),
        (['{"prompt": "a"}', GOOD[1]], r"mix\.jsonl:1: no output_tokens, while line 2 gives one"),
        (GOOD[:3], r"holds 3 prompts and a level measures 4 requests: give at least 4 lines"),
    ],
)
def test_a_bad_prompts_file_is_refused_at_its_line_with_what_to_do(tmp_path, lines, message):
    if lines is not None:
        prompts_file(tmp_path / "specs" / "mix.jsonl", lines)
    with pytest.raises(SpecError, match=message) as err:
        load_spec(serving_spec(tmp_path, "prompts: mix.jsonl"))
    assert str(err.value).startswith(f"{tmp_path}/specs/mix.yaml:8 arms[0].load.prompts: ")


def test_a_prompts_file_needs_a_jsonl_name(tmp_path):
    with pytest.raises(SpecError, match=r"arms\[0\]\.load\.prompts: 'mix\.json': .* only by a \.jsonl name"):
        load_spec(serving_spec(tmp_path, "prompts: mix.json"))


@pytest.mark.parametrize(
    ("load", "arm", "message"),
    [
        ("prompts: mix.jsonl", "prompt_len: 64\n", r"arms\[0\]\.prompt_len: the prompts file .* sets each prompt"),
        ("prompts: mix.jsonl", "max_tokens: 8\n", r"arms\[0\]\.max_tokens: every line of the prompts file"),
        ("prompts: mix.jsonl, prefix_len: 8", "", r"load\.prefix_len: prefix_len draws a shared prefix for random"),
        ("prompts: mix.jsonl, range_ratio: 0.1", "", r"load\.range_ratio: range_ratio spreads random prompts"),
        ("prefix_len: 128", "", r"load\.prefix_len: prefix_len 128 must be below prompt_len 128"),
        ("prefix_len: 127", "", None),
    ],
)
def test_a_mix_whose_lengths_contradict_the_arm_is_refused(tmp_path, load, arm, message):
    prompts_file(tmp_path / "specs" / "mix.jsonl", GOOD)
    spec = serving_spec(tmp_path, load, arm)
    if message is None:
        assert load_spec(spec).sweep.arms[0].load.prefix_len == 127
        return
    with pytest.raises(SpecError, match=message):
        load_spec(spec)


def llama_spec(load: dict, params: dict | None = None, **arm) -> dict:
    body = {"name": "l", "engine": "llamacpp", "model": "tiny-llama", "context_len": 512, "params": params or {}}
    if load is not None:
        body["load"] = {"concurrency": [1], "requests": 4, **load}
    return {"name": "x", "slots": {"cores": 1, "client_cores": 1}, "arms": [{**body, **arm}]}


def test_llama_servers_prompt_cache_is_a_serving_knob_and_its_completions_count_needs_max_tokens(tmp_path):
    with pytest.raises(SpecError, match=r"arms\[0\]\.params\.prefix_caching: llama\.cpp's prefix caching is"):
        validate_sweep(llama_spec(None, {"prefix_caching": True}))
    path = str(prompts_file(tmp_path / "mix.jsonl", GOOD))
    with pytest.raises(SpecError, match=r"load\.prompts: llama-server's completions stream .* use endpoint: chat"):
        validate_sweep(llama_spec({"prompts": path}))
    assert validate_sweep(llama_spec({"prompts": path, "endpoint": "chat"})).arms[0].load.prompts_output_tokens
    path = str(prompts_file(tmp_path / "plain.jsonl", ['{"prompt": "a"}'] * 4))
    assert validate_sweep(llama_spec({"prompts": path}, max_tokens=8)).arms[0].max_tokens == 8
    with pytest.raises(SpecError, match=r"load\.prompts: a prompts arm needs context_len"):
        validate_sweep(llama_spec({"prompts": path}, context_len=None))


# --- the servers' flags ---


def server_payload(sweep_arm, **extra) -> dict:
    payload = sweep_arm.model_dump(mode="json")
    payload.update(model_path="/m", threads_effective=1, serve={"host": "127.0.0.1", "port": 8000}, **extra)
    return payload


@pytest.mark.parametrize("cached", [False, True])
def test_llama_server_runs_its_prompt_cache_as_asked_and_never_the_host_memory_one(cached):
    arm = validate_sweep(llama_spec({"endpoint": "chat"}, {"prefix_caching": cached})).arms[0]
    flags = llama_server_flags(server_payload(arm))
    assert ("--cache-prompt" in flags, "--no-cache-prompt" in flags) == (cached, not cached)
    assert after(flags, "--cache-ram") == "0"
    assert flags[-3:] == ["--jinja", "--chat-template", CHAT_TEMPLATE]  # the factory's model has none
    plain = llama_server_flags(server_payload(validate_sweep(llama_spec({})).arms[0]))
    assert "--chat-template" not in plain  # completions: the server as before


@pytest.mark.parametrize(("cached", "flag"), [(False, "--no-enable-prefix-caching"), (True, "--enable-prefix-caching")])
def test_vllms_server_is_told_its_prefix_caching_and_a_chat_template_for_a_factory_model(cached, flag):
    body = {
        "name": "v",
        "engine": "vllm",
        "model": "tiny-llama",
        "context_len": 512,
        "params": {"prefix_caching": cached},
    }
    body["load"] = {"concurrency": [1], "requests": 4, "endpoint": "chat"}
    arm = validate_sweep({"name": "x", "slots": {"cores": 1, "client_cores": 1}, "arms": [body]}).arms[0]
    argv = vllm_server_argv(server_payload(arm, workdir="/w"))
    assert flag in argv and after(argv, "--chat-template") == CHAT_TEMPLATE
    elsewhere = vllm_server_argv(server_payload(arm, workdir="/w") | {"model": "/some/checkpoint"})
    assert "--chat-template" not in elsewhere  # a model of its own brings its own template


# --- what the servers report ---

PROMETHEUS = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="0"} 1.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1024.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 512.0
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 255
"""


def test_a_level_keeps_what_the_prefix_cache_served_and_whether_the_server_had_one():
    assert parse_metrics(PROMETHEUS) == {
        "vllm:cache_config_info:enable_prefix_caching": 1.0,
        "vllm:prefix_cache_queries_total": 1024.0,
        "vllm:prefix_cache_hits_total": 512.0,
        "llamacpp:prompt_tokens_cached_total": 255.0,
    }
    off = PROMETHEUS.replace('enable_prefix_caching="True"', 'enable_prefix_caching="False"')
    assert parse_metrics(off)["vllm:cache_config_info:enable_prefix_caching"] == 0.0


def test_the_servers_prompt_count_holds_the_tokens_its_cache_served():
    # llama-server counts the tokens it prefilled and those its cache served apart; vLLM counts both in one
    llama = {"llamacpp:prompt_tokens_total": {"change": 100.0}, "llamacpp:prompt_tokens_cached_total": {"change": 28.0}}
    assert server_prompt_tokens(llama) == 128.0
    assert server_prompt_tokens({"vllm:prompt_tokens_total": {"change": 128.0}}) == 128.0


def chat_request(itl: list[float], out: int) -> dict:
    return {"ok": True, "output_tokens": out, "itl_ms": itl, "ttft_ms": 10.0, "e2e_ms": 10.0 + sum(itl)}


def test_a_chat_requests_role_chunk_is_no_token_gap():
    # vLLM: the role, then a chunk per token; llama-server adds its closing chunk
    vllm, llama = chat_request([0.01, 5.0, 5.0, 5.0], 4), chat_request([0.01, 5.0, 5.0, 5.0, 0.02], 4)
    reconcile_output_tokens([vllm, llama], {}, 0, 4, 0.0, endpoint="chat")
    assert vllm["itl_ms"] == [5.0, 5.0, 5.0] and llama["itl_ms"] == [5.0, 5.0, 5.0]


# --- the prompts writer ---


def test_the_prompts_writer_draws_the_same_mix_from_the_same_seed_in_words_of_one_token(tmp_path):
    lines = mix_prompts(count=40, min_len=20, max_len=300, prefix_len=16, output_len=(4, 9), seed=5)
    assert lines == mix_prompts(count=40, min_len=20, max_len=300, prefix_len=16, output_len=(4, 9), seed=5)
    assert lines != mix_prompts(count=40, min_len=20, max_len=300, prefix_len=16, output_len=(4, 9), seed=6)
    words = {token[1:] for token in vocabulary(PRESETS["tiny-llama"])[N_SPECIAL + N_BYTES :]}
    prompts = [line["prompt"].split(" ") for line in lines]
    assert all(set(p) <= words for p in prompts)  # each a token of the model's own, so n words are n tokens
    assert all(20 <= len(p) <= 300 for p in prompts) and len({len(p) for p in prompts}) > 20
    assert all(p[:16] == prompts[0][:16] for p in prompts) and len({tuple(p[16:18]) for p in prompts}) == 40
    assert all(4 <= line["output_tokens"] <= 9 for line in lines)
    assert "output_tokens" not in mix_prompts(count=3, output_len=None)[0]
    write_prompts(tmp_path / "mix.jsonl", lines)
    assert [json.loads(x) for x in (tmp_path / "mix.jsonl").read_text(encoding="utf-8").splitlines()] == lines


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"prefix_len": 32, "min_len": 32}, "prefix_len < min_len"), ({"output_len": (9, 4)}, "shortest answer")],
)
def test_the_prompts_writer_refuses_lengths_that_cannot_be(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mix_prompts(**kwargs)


def test_output_lengths_are_a_range_one_length_or_none():
    assert (output_range("16-64"), output_range("32"), output_range("none")) == ((16, 64), (32, 32), None)


def test_the_repos_mix_is_the_writers_and_its_spec_is_valid():
    """arms/serve-mix.jsonl is what its spec's comment says wrote it."""
    lines = mix_prompts(count=48, min_len=272, max_len=448, prefix_len=256, output_len=(16, 64), seed=0)
    stored = (REPO / "arms" / "serve-mix.jsonl").read_text(encoding="utf-8")
    assert stored == "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    sweep = load_spec(REPO / "arms" / "serve-mix.yaml").sweep
    assert {a.engine for a in sweep.arms} == {"vllm", "llamacpp"}
    assert {a.load.endpoint for a in sweep.arms} == {"chat"}
    assert {a.engine_params().prefix_caching for a in sweep.arms} == {False, True}
