"""omni: multi-pass, NUMA-pinned benchmark sweeps of CPU LLM inference."""

__version__ = "0.1.0"
