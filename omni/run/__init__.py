"""One run of one arm: from a spec to the ordered plan of runs (``plan``),
runs on slots with per-CPU locks (``schedule``), the engine process and its
log (``engine_process``), running one item (``runner``), turning what
happened into a row (``row``) and the rules that doubt its numbers
(``validity``). Layer: run. Killing processes (``reaper``: a run's, or a
process group's, as the stack stops its servers) and live progress
(``progress``) are the system layer, below it.
"""
