"""The tuner's sampler names: one list for the tuner, the command line and the pytest options, in a
module light enough to import while pytest parses its options (no numpy, no Optuna)."""

SAMPLERS = ("bo", "tpe", "random", "grid", "cmaes", "gp")
DEFAULT_SAMPLER = "bo"  # with the warm starts and the device priors: the default strategy (bench-search)
