"""The lab: landscapes (every configuration of a key, timed), the replay backend, and bench-search.

May import: core, backends, measure, gate, tuner, report."""

import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def one_thread_env() -> None:
    """Ask the linear-algebra libraries loaded from now on for one thread each, unless the user set a
    number (``benchsearch.one_thread`` says why a replay wants one)."""
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
