"""Example kernels of the kind LLM serving stacks ship, as pytest-ktune templates."""
