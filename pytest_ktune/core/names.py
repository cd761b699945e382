"""The names of the built-in backends, samplers and write-back modes: one list of each, in a module
light enough to import while pytest parses its options. Plugins add more through the hooks of
``pytest_ktune.hookspecs``."""

BACKENDS = ("cuda", "opencl", "triton")
# The backends whose sources are C files (kernels with -D macros); a triton source is a @triton.jit function
C_BACKENDS = ("cuda", "opencl")
AUTO = "auto"  # the backend choice that means: cuda where a GPU is visible, else opencl
SAMPLERS = ("bo", "tpe", "random", "grid", "cmaes", "gp")
DEFAULT_SAMPLER = "bo"  # with the warm starts and the device priors: the default strategy (bench-search)
WRITE_MODES = ("none", "file", "patch", "commit", "pr")
DEFAULT_WRITE = "none"
