"""Reports of frozen results: the terminal tables, JUnit XML, pytest-benchmark JSON, and a study's
markdown and SVG plots.

May import: core, backends, measure, gate, tuner."""
