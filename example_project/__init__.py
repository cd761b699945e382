"""An example project of LLM-serving kernels checked and timed by pytest-ktune."""
