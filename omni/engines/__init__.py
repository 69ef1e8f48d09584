"""Engines: code that runs inside an engine environment and speaks the engine
protocol (``python -m omni.engines.<kind> --arm ARM.json --out RESULT.json``)."""
