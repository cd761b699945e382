"""The lab: landscapes (every configuration of a key, timed), the replay backend, and bench-search.

May import: core, backends, measure, gate, tuner, report."""
