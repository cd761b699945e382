"""Reports of frozen results: the terminal tables, JUnit XML, pytest-benchmark JSON, and a study's
markdown and SVG plots; the tuned parameters exported for code built ahead of time (a C++ header, JSON).

May import: core, backends, measure, gate, tuner."""
