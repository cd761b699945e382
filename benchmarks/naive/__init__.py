"""Deliberately naive starting kernels, as serving stacks ship them: scalar loads, fixed 128-thread
blocks, a capped grid, nothing to tune. The starting point of ``bench_agent.py`` and of the templater's tests."""
