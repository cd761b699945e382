"""Unit tests of the core library, called directly: no pytest plugin, no --ktune, no device."""
