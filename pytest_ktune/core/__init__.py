"""The core: targets, spaces, cases, the params file, keys, includes, errors, git queries and discovery.

Imports nothing else of the package, and never pytest."""
