"""The params file: stable rendering, strict loading with useful errors, atomic merging saves."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

from pytest_ktune import StoreError
from pytest_ktune.core.store import FORMAT, Baseline, Record, Store, Timing

DEVICE = "NVIDIA H200 [cuda]"


def _record(target: str = "kernels/rmsnorm.py::rmsnorm", device: str = DEVICE,
            key: dict[str, Any] | None = None, params: dict[str, Any] | None = None,
            with_baseline: bool = True) -> Record:
    baseline = Baseline(
        params=params or {"BLOCK": 256, "VEC": 4},
        source_hash="0123456789abcdef", source_path="kernels/rmsnorm.cu", commit="abc1234",
        date="2025-01-02T03:04:05Z", ktune_version="0.1.0",
        timings={"T64-H4096-float16": Timing(median_us=12.5, iqr_us=0.25, ci_low_us=12.25,
                                            ci_high_us=12.75, samples=40, gbps=812.5),
                 "T1-H4096-float16": Timing(median_us=3.0, iqr_us=0.5, ci_low_us=2.75, ci_high_us=3.25,
                                           samples=12)},
    ) if with_baseline else None
    return Record(target=target, device=device, key=key or {"T": 64, "H": 4096, "dtype": "float16"},
                  params=params or {"BLOCK": 256, "VEC": 4}, baseline=baseline)


def _records() -> list[Record]:
    return [
        _record(),
        _record(key={"T": 1, "H": 4096, "dtype": "float16"}, params={"BLOCK": 128, "VEC": 8}),
        _record(target="kernels/silu.py::silu", device="pthread-CPU (PoCL) [opencl]",
                params={"BLOCK": 64, "VEC": 1, "FAST": True, "LAYOUT": "row", "ALPHA": 0.5},
                with_baseline=False),
    ]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ktune-params.json"


def _valid_json() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Store(Path("x"), _records()).render())
    return data


def _write(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data))


# -- rendering and loading ---------------------------------------------------
def test_render_then_load_round_trips_byte_for_byte(path: Path) -> None:
    store = Store(path, _records())
    text = store.render()
    path.write_text(text)
    loaded = Store.load(path)
    assert loaded.records == store.records
    assert loaded.render() == text
    loaded.save([])
    assert path.read_text() == text, "rewriting an unchanged file must not change a byte"


def test_rendering_does_not_depend_on_insertion_order(path: Path) -> None:
    records = _records()
    assert Store(path, records).render() == Store(path, records[::-1]).render()
    shuffled_key = _record(key={"dtype": "float16", "H": 4096, "T": 64})
    assert Store(path, [shuffled_key]).render() == Store(path, [_record()]).render()


def test_rendered_file_is_sorted_and_readable(path: Path) -> None:
    text = Store(path, _records()).render()
    data = json.loads(text)
    assert data["format"] == FORMAT
    idents = [(r["target"], r["device"]) for r in data["records"]]
    assert idents == sorted(idents)
    assert text.endswith("}\n") and '\n  "records": [' in text


def test_find_ignores_key_order(path: Path) -> None:
    store = Store(path, _records())
    found = store.find("kernels/rmsnorm.py::rmsnorm", DEVICE, {"dtype": "float16", "T": 1, "H": 4096})
    assert found is not None and found.params == {"BLOCK": 128, "VEC": 8}
    assert store.find("kernels/rmsnorm.py::rmsnorm", "another [cuda]", {"T": 1, "H": 4096,
                                                                      "dtype": "float16"}) is None
    assert len(store.for_target("kernels/rmsnorm.py::rmsnorm")) == 2


def test_a_missing_file_is_an_empty_store(path: Path) -> None:
    assert Store.load(path).records == {}


# -- damaged files -----------------------------------------------------------
def _load_error(path: Path) -> str:
    with pytest.raises(StoreError) as info:
        Store.load(path)
    message = str(info.value)
    assert str(path) in message, "the error must name the file"
    return message


def test_corrupt_json_names_the_file_and_how_to_recover(path: Path) -> None:
    path.write_text('{"format": "pytest-ktune/1",\n "records": [\n')
    message = _load_error(path)
    assert "not valid JSON" in message and "line 3" in message
    assert "git checkout -- ktune-params.json" in message


@pytest.mark.parametrize("data", [[], {"records": []}, {"format": "pytest-ktune/0", "records": []}])
def test_a_file_without_the_format_header(path: Path, data: Any) -> None:
    _write(path, data)
    assert "format" in _load_error(path)


def test_a_file_without_a_records_list(path: Path) -> None:
    _write(path, {"format": FORMAT, "records": {}})
    assert '"records" list' in _load_error(path)


def _set(*keys: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def mangle(data: dict[str, Any]) -> None:
        node = data
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return mangle


def _delete(*keys: Any) -> Callable[[dict[str, Any]], None]:
    def mangle(data: dict[str, Any]) -> None:
        node = data
        for k in keys[:-1]:
            node = node[k]
        del node[keys[-1]]
    return mangle


TIMING = ("records", 0, "baseline", "timings", "T1-H4096-float16")


@pytest.mark.parametrize(("mangle", "words"), [
    (_set("records", 0, value="oops"), "record 0 is not an object"),
    (_delete("records", 1, "device"), "record 1 has no valid 'device'"),
    (_set("records", 0, "key", value="T=64"), "record 0 has no valid 'key'"),
    (_set("records", 0, "params", "BLOCK", value=[64, 128]), "parameter BLOCK"),
    (_set("records", 0, "params", "BLOCK", value=None), "parameter BLOCK"),
    (_set("records", 0, "baseline", value=[]), "record 0 baseline is not an object"),
    (_delete("records", 0, "baseline", "source_hash"), "'source_hash'"),
    (_set("records", 0, "baseline", "commit", value=1234), "commit that is not a string"),
    (_set("records", 0, "baseline", "timings", value=[]), "timings is not an object"),
    (_delete(*TIMING, "median_us"), "median_us"),
    (_set(*TIMING, "median_us", value="fast"), "median_us"),
    (_set(*TIMING, "samples", value=1.5), "samples"),
])
def test_a_hand_mangled_record_is_a_store_error(path: Path, mangle: Callable[[dict[str, Any]], None],
                                                words: str) -> None:
    data = _valid_json()
    mangle(data)
    _write(path, data)
    message = _load_error(path)
    assert "damaged" in message and words in message


@pytest.mark.parametrize(("where", "field"), [
    (("records", 0), "note"),
    (("records", 0, "baseline"), "machine"),
    (TIMING, "p99_us"),
])
def test_unknown_fields_are_rejected(path: Path, where: tuple[Any, ...], field: str) -> None:
    data = _valid_json()
    _set(*where, field, value=1)(data)
    _write(path, data)
    assert field in _load_error(path)


def test_a_null_baseline_is_rejected(path: Path) -> None:
    data = _valid_json()
    data["records"].append({"target": "t", "device": "d", "key": {}, "params": {}, "baseline": None})
    _write(path, data)
    assert "record 3 baseline is not an object" in _load_error(path)


# -- saving ------------------------------------------------------------------
def test_save_merges_with_what_is_on_disk_now(path: Path) -> None:
    a, b, c = _records()
    mine = Store.load(path)            # read before another process wrote the file
    other = Store.load(path)
    other.save([a, b])
    mine.save([c])
    on_disk = Store.load(path)
    assert set(on_disk.records) == {a.ident, b.ident, c.ident}
    assert mine.records == on_disk.records
    # An update replaces the record with the same target, device and key.
    changed = _record(params={"BLOCK": 512, "VEC": 2})
    mine.save([changed])
    on_disk = Store.load(path)
    assert len(on_disk.records) == 3
    assert on_disk.records[a.ident].params == {"BLOCK": 512, "VEC": 2}


def test_save_creates_the_folder_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "ktune-params.json"
    Store(path).save(_records())
    assert [p.name for p in path.parent.iterdir()] == ["ktune-params.json"]
    assert len(Store.load(path).records) == 3


def test_a_failed_save_leaves_the_old_file_untouched(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Store(path).save(_records()[:1])
    before = path.read_bytes()

    def fail(*args: Any, **kwargs: Any) -> NoReturn:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    monkeypatch.setattr(Path, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        Store(path).save(_records())
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["ktune-params.json"]


def test_save_refuses_to_overwrite_a_damaged_file(path: Path) -> None:
    path.write_text("{ not json")
    with pytest.raises(StoreError):
        Store(path).save(_records())
    assert path.read_text() == "{ not json"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_timing_is_rejected(path: Path, literal: str) -> None:
    text = json.dumps(_valid_json()).replace('"median_us": 12.5', f'"median_us": {literal}', 1)
    assert literal in text
    path.write_text(text)
    with pytest.raises(StoreError, match="median_us"):
        Store.load(path)
