"""Telling what a parameter is from its name, by whole words: ``VEC_SIZE`` is a vector width,
``filter_width`` and ``TILE_WIDTH`` are not (``WIDTH`` counts only as the whole name).

A name's words are its parts between underscores, case changes and digits: ``blockSizeX`` and
``BLOCK_SIZE_X`` are both ``block size x``. The tuner's priors and the rule-based templater use
these patterns where a target says nothing; a target's ``vectors=`` overrides them.
"""

from __future__ import annotations

import re

_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z])(?=[A-Z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")


def words(name: str) -> tuple[str, ...]:
    """The lower-case words of a name: ``VEC_WIDTH`` -> ``("vec", "width")``, ``blockSize`` ->
    ``("block", "size")``, ``VEC4`` -> ``("vec", "4")``."""
    return tuple(w.lower() for w in _SPLIT.split(name) if w)


class NamePattern:
    """Names that hold one of ``phrases`` as consecutive whole words (``"per_thread"`` is two words),
    or that are, whole, one of ``alone``."""

    def __init__(self, *phrases: str, alone: tuple[str, ...] = ()) -> None:
        self.phrases = tuple(words(p) for p in phrases)
        self.alone = frozenset(words(a) for a in alone)

    def search(self, name: str) -> bool:
        """Whether ``name`` is named like this (the name of ``re.Pattern.search``, which this replaces)."""
        have = words(name)
        if have in self.alone:
            return True
        for phrase in self.phrases:
            n = len(phrase)
            if any(have[i:i + n] == phrase for i in range(len(have) - n + 1)):
                return True
        return False


#: A parameter that sets how many elements a thread loads at once: VEC, VECTOR or PACK as a word of
#: its name (VEC, VEC_SIZE, vector_width, PACK), or WIDTH alone.
VECTOR_NAME = NamePattern("VEC", "VECS", "VECTOR", "VECTORS", "PACK", alone=("WIDTH",))
