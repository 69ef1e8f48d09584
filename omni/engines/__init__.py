"""Engines: code that runs inside an engine environment and speaks the engine
protocol (``python -m omni.engines.<kind> --arm ARM.json --out RESULT.json``).
Engine side: the standard library, the engine's own libraries and the other
engine-side modules (``omni.ENGINE_SIDE``) only, as an engine env holds no
other package of omni's.
"""
