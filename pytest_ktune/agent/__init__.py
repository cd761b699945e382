"""Stage 1 of the method: turning a kernel into an explicitly parameterised template.

A :class:`~pytest_ktune.agent._proposal.Proposal` is a template (kernel source whose tunable choices
are macros, their space, and how the launch geometry follows from them). Proposals come from the
rule-based templater (``_rules``), from an LLM agent (``_loop``), or from a user; every one is checked
in the isolated worker (``check_proposal``) before it counts, and only a verified one is written
(``write_template``). ``ktune templatize`` (``_templatize``) ties these together.

Nothing heavy is imported here: import the submodules you need.
"""
