"""Writing tuned winners back: the params file in place, a patch, a branch, a pull request.

May import: core, backends, measure, gate, tuner (not report, nor its siblings agent and lab)."""
