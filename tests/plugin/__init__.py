"""End-to-end tests of the pytest plugin, through pytester projects run on PoCL's CPU device."""
