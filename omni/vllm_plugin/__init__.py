"""omni's vLLM plugin: runtime patches for real CPU bugs, through vLLM's own
extension points (the ``vllm.general_plugins`` entry point runs ``register``
in every vLLM process: main, EngineCore, Worker). vLLM itself stays stock.
"""


def register() -> None:
    from omni.vllm_plugin.head import report_head_from_env
    from omni.vllm_plugin.patch import apply_from_env, register_quantization

    apply_from_env()
    register_quantization()
    report_head_from_env()
