"""One run of the gate or the tuner: what the pytest plugin and the ktune command call.

May import every layer below the skins."""
