"""The regression gate: thresholds, the screen against a baseline, the A/B confirmation, and the
verdict of one performance item, and the reference it is judged against (a commit's whole target
where its launcher module changed: ``snapshot``).

May import: core, backends, measure (not tuner: the gate and the tuner are siblings)."""
