"""The landscape file: a round trip, and a clear error for each kind of bad file."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_ktune.lab.landscape import FORMAT, LandscapeError, load, space_of

from ._data import SILU, landscape, target


@pytest.mark.parametrize("name", ["land.json", "land.json.gz"])
def test_round_trip_keeps_every_point_and_the_header(tmp_path: Path, name: str) -> None:
    land = landscape(SILU)
    back = load(land.save(tmp_path / name))
    assert back.points == land.points
    assert (back.target, back.key, back.source_hash, back.device_id) == \
        (land.target, land.key, land.source_hash, "NVIDIA H200 [cuda]")
    assert back.optimum.params == {"BLOCK": 128, "VEC": 8, "ITEMS": 1}


def test_one_row_a_line_so_a_diff_shows_the_points_that_changed() -> None:
    lines = SILU.read_text().splitlines()
    assert json.loads(lines[0][: lines[0].index(', "rows"')] + "}")["format"] == FORMAT
    assert len(lines) == 2 + len(landscape(SILU).points)
    assert "converted from" in landscape(SILU).note


@pytest.mark.parametrize("cut", [0.5, 0.99])
def test_a_truncated_file_names_itself_and_the_next_step(tmp_path: Path, cut: float) -> None:
    text = SILU.read_text()
    bad = tmp_path / "cut.json"
    bad.write_text(text[: int(len(text) * cut)])
    with pytest.raises(LandscapeError, match="truncated") as err:
        load(bad)
    assert err.value.where == str(bad)
    assert "ktune record" in (err.value.hint or "")


def test_a_truncated_gzip_file(tmp_path: Path) -> None:
    data = gzip.compress(SILU.read_bytes())
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(LandscapeError, match="truncated"):
        load(bad)


def test_rows_removed_by_hand_are_caught_by_the_count(tmp_path: Path) -> None:
    lines = SILU.read_text().splitlines()
    del lines[3]
    bad = tmp_path / "short.json"
    bad.write_text("\n".join(lines))
    with pytest.raises(LandscapeError, match="promises 60 rows, it has 59"):
        load(bad)


def test_not_a_landscape(tmp_path: Path) -> None:
    other = tmp_path / "params.json"
    other.write_text('{"format": "pytest-ktune-params/1", "records": []}')
    with pytest.raises(LandscapeError, match="not a landscape file"):
        load(other)


def test_another_source_hash_names_both_hashes_and_says_record_again() -> None:
    land = replace(landscape(SILU), source_hash="0123456789abcdef")
    t = target("silu_and_mul")
    with pytest.raises(LandscapeError) as err:
        land.check_for(t.source_hash("cuda"), space_of(t), what=t.name)
    assert "0123456789abcdef" in err.value.message and t.source_hash("cuda") in err.value.message
    assert f"record it again on a cuda device: ktune record --redo {land.where}" in (err.value.hint or "")


def test_another_space_shows_both_spaces() -> None:
    land = landscape(SILU)
    t = target("silu_and_mul")
    space = space_of(t)
    space["params"]["ITEMS"] = [1, 2, 4, 8]
    with pytest.raises(LandscapeError, match=r"another parameter space.*ITEMS=\[1, 2, 4\].*ITEMS=\[1, 2, 4, 8\]"):
        land.check_for(t.source_hash("cuda"), space, what=t.name)
