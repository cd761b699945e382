"""Targets for the production-call benchmarks (``benchmarks/production_call_cpu.py``)."""
