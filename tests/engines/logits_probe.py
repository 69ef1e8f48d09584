"""Logits of a fixed token prompt, from transformers (HF dir) or llama.cpp (GGUF).

Run inside an engine env: ``python tests/engines/logits_probe.py hf|gguf PATH OUT.npy``.
Writes float32 logits of shape (len(PROMPT), vocab).
"""

import sys

import numpy as np

PROMPT = [1, 300, 4711, 9000, 512, 1234, 777, 3000, 2999, 42 + 259, 8000, 600, 601, 602, 9999, 5000]


def hf_logits(path: str) -> np.ndarray:
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0].numpy()


def gguf_logits(path: str) -> np.ndarray:
    import llama_cpp

    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(path.encode(), llama_cpp.llama_model_default_params())
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx, cparams.n_threads, cparams.n_threads_batch = 64, 1, 1
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    batch = llama_cpp.llama_batch_init(len(PROMPT), 0, 1)
    for i, tok in enumerate(PROMPT):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tok, i, 1, True
        batch.seq_id[i][0] = 0
    batch.n_tokens = len(PROMPT)
    assert llama_cpp.llama_decode(ctx, batch) == 0
    rows = [
        np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
        for i in range(len(PROMPT))
    ]
    return np.stack(rows)


if __name__ == "__main__":
    kind, path, out = sys.argv[1:4]
    np.save(out, (hf_logits if kind == "hf" else gguf_logits)(path).astype(np.float32))
