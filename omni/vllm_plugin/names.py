"""What the plugin offers, importable without vLLM (the spec validates against it)."""

PATCHES = ("aot_compile_cache_load", "explicit_kv_cache_memory", "release_memory_after_load")
QUANTIZATIONS = ("cpu_int4",)

# How the engine tells every vLLM process what to apply and where to report.
SELECT_VAR = "OMNI_VLLM_PATCHES"  # "all", "none" or "a,b"
REPORT_VAR = "OMNI_PATCH_REPORT"  # file each process appends one JSON line to
QUANT_VAR = "OMNI_VLLM_QUANTIZATION"  # set when an arm asks for one of QUANTIZATIONS
# a test-only fault: "bf16" leaves cpu_int4's output head in bf16 whatever the
# arm's int4_lm_head says, as the checkpoint once retracted for it did; set it
# in an arm's env: to check that omni's bf16-head rule catches the lie
FAULT_HEAD_VAR = "OMNI_FAULT_INT4_HEAD"
# file the process that loads the model writes the output head, as loaded, to (JSON)
HEAD_VAR = "OMNI_HEAD_REPORT"
