"""The regression gate: thresholds, the screen against a baseline, the A/B confirmation, and the
verdict of one performance item.

May import: core, backends, measure."""
