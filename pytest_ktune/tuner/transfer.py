"""How far a record made for another key or device is from the key being tuned: warm starts that transfer.

The best configuration of a key says most about keys like it. A record is weighed by a distance,
summed over what tells the keys apart:

* each numeric dimension of the key: how many doublings apart the two values are (``|log2(a/b)|``:
  a key 128 times larger is 7 away, the same launch-bound shape at twice the rows 1);
* each dimension that names a dtype: ``ELEMENT_SIZE`` per doubling between the element sizes, more
  than ``NEAR`` (a float32 key's best vector width says little about a float16 key's: such a record
  is always far), and half a step between two types of one size (float16 and bfloat16);
* each other dimension that differs, or that only one of the keys has: 1;
* another device: 1 (what the same kernel liked on another GPU is a good guess, but a guess).

A record no more than ``NEAR`` away is timed among the near warm starts (after the leading device
priors); a farther one only after every device prior (``tune_key``), so that a dissimilar key's best
never comes before what the launch arithmetic says for this key. Within each group, the nearest first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pytest_ktune.core.dtypes import as_dtype
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.space import is_number

NEAR = 2.0


OTHER_DEVICE = 1.0


ELEMENT_SIZE = 3.0


def _itemsize(v: Any) -> int | None:
    if not isinstance(v, str):
        return None
    try:
        return int(as_dtype(v).itemsize)
    except (TypeError, KtuneError):
        return None


def _dimension(a: Any, b: Any) -> float:
    if is_number(a) and is_number(b):
        if a == b:
            return 0.0
        if a > 0 and b > 0:
            return abs(math.log2(a / b))
        return 1.0
    sa, sb = _itemsize(a), _itemsize(b)
    if sa is not None and sb is not None:
        if sa != sb:
            return ELEMENT_SIZE * abs(math.log2(sa / sb))
        return 0.0 if str(a) == str(b) else 0.5
    return 0.0 if str(a) == str(b) else 1.0


def key_distance(key: Mapping[str, Any], other: Mapping[str, Any]) -> float:
    """How far ``other`` is from ``key`` (the module docstring says how it is counted; 0: the same)."""
    out = 0.0
    for name in {*key, *other}:
        if name not in key or name not in other:
            out += 1.0
        else:
            out += _dimension(key[name], other[name])
    return out


def record_distance(key: Mapping[str, Any], device: str, record_key: Mapping[str, Any], record_device: str) -> float:
    """The distance of a record (its key and device) from the key being tuned on ``device``."""
    return key_distance(key, record_key) + (OTHER_DEVICE if record_device != device else 0.0)


def is_near(distance: float) -> bool:
    return distance <= NEAR + 1e-9
