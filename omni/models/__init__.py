"""omni's own model factory: deterministic random-weight models, HF
directories and matching GGUF files, at tiny and realistic shapes
(``factory``), and request mixes of prompts in their own words (``prompts``).
Engine side: it runs inside an engine env (``python -m omni.models.factory``), so it
imports the standard library, the engine libraries (numpy, gguf, llama_cpp)
and nothing else of omni.
"""
