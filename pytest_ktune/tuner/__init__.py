"""The tuner: an Optuna study per target, device and key; samplers (bo, the device priors), the
ask/tell loop, storage, the decision, and joining shared studies.

May import: core, backends, measure (not gate: the gate and the tuner are siblings)."""
