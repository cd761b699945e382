"""Per-backend spaces (per_backend=, ktune.BackendSpace), names read by whole words, and ktune.grid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_ktune import BackendSpace, Case, Space, SpaceError, Target, Tensor, grid, target
from pytest_ktune.core.words import VECTOR_NAME, words

THIS_FILE = str(Path(__file__).resolve())


def convolution(kernel: Any, x: Any) -> Any:
    return x


def _make(**overrides: Any) -> Target:
    options: dict[str, Any] = {
        "sources": {"cuda": "conv.cu", "opencl": "conv.cl"},
        "space": Space(BLOCK=[64, 128], TILE=[1, 2], read_only=[0, 1],
                       constraints=["H % TILE == 0", "read_only == 0 or BLOCK == 128"]),
        "default": {"BLOCK": 64, "TILE": 1, "read_only": 0},
        "key": lambda x: {"H": x.shape[0]},
        "cases": [Case(x=Tensor((8,)))],
        "reference": lambda x: x,
        "per_backend": {"opencl": BackendSpace(drop=["read_only"], BLOCK=[64, 128, 256], VEC=[1, 4],
                                               default={"BLOCK": 256, "VEC": 4},
                                               constraints=["H % VEC == 0"])},
    }
    options.update(overrides)
    return target(**options)(convolution)


def test_a_backend_adds_drops_and_sets_what_it_tunes() -> None:
    t = _make()
    cuda, cl = t.for_backend("cuda"), t.for_backend("opencl")
    # CUDA has no per_backend entry: the target as declared.
    assert cuda is t and dict(cuda.space.params) == {"BLOCK": (64, 128), "TILE": (1, 2), "read_only": (0, 1)}
    assert dict(cl.space.params) == {"BLOCK": (64, 128, 256), "TILE": (1, 2), "VEC": (1, 4)}
    assert cl.default == {"BLOCK": 256, "TILE": 1, "VEC": 4}
    # The shared constraint naming the dropped parameter goes with it; the backend's own is added.
    assert [c.text for c in cl.space.constraints] == ["H % TILE == 0", "H % VEC == 0"]
    assert cl.resolved_for == "opencl" and cl.for_backend("opencl") is cl
    # Made once, and the way back to the declared target and to the other backend works from a view.
    assert t.for_backend("opencl") is cl and cl.for_backend("cuda") is t
    assert len(list(cl.space.feasible({"H": 8}))) == 3 * 2 * 2
    cl.check_config({"BLOCK": 256, "TILE": 2, "VEC": 4}, {"H": 8}, "default configuration")
    with pytest.raises(SpaceError, match="unknown parameter read_only"):
        cl.check_config({"BLOCK": 256, "TILE": 2, "VEC": 4, "read_only": 1}, {"H": 8}, "recorded configuration")


def test_a_record_of_another_backend_carries_over_its_shared_parameters() -> None:
    cl = _make().for_backend("opencl")
    assert cl.carry_over({"BLOCK": 128, "TILE": 2, "read_only": 1}) == {"BLOCK": 128, "TILE": 2, "VEC": 4}


@pytest.mark.parametrize(("variant", "words_"), [
    (BackendSpace(drop=["TILES"]), "drops ['TILES'], which the shared space does not have"),
    (BackendSpace(drop=["TILE"], TILE=[4]), "both drops and adds ['TILE']"),
    (BackendSpace(VEC=[1, 2]), "missing ['VEC']"),
    (BackendSpace(default={"WARP": 32}), "unknown ['WARP']"),
    (BackendSpace(drop=["BLOCK", "TILE", "read_only"]), "drops every parameter"),
])
def test_a_backend_space_that_does_not_fit_fails_naming_the_target_and_backend(variant: BackendSpace,
                                                                               words_: str) -> None:
    with pytest.raises(SpaceError) as info:
        _make(per_backend={"opencl": variant})
    message = str(info.value)
    assert words_ in message and "target convolution (" in message and THIS_FILE in message
    assert "opencl" in message


def test_per_backend_names_only_backends_with_a_source() -> None:
    with pytest.raises(SpaceError, match=r"per_backend= names 'cuda', which has no source") as info:
        _make(sources={"opencl": "conv.cl"}, per_backend={"cuda": BackendSpace(drop=["read_only"])})
    assert THIS_FILE in str(info.value)
    with pytest.raises(SpaceError, match=r"per_backend\['opencl'\] is a dict"):
        _make(per_backend={"opencl": {"drop": ["read_only"]}})
    with pytest.raises(SpaceError, match="is a string"):
        BackendSpace(drop="read_only")


def test_vectors_may_name_a_parameter_one_backend_adds() -> None:
    t = _make(vectors=["VEC"])
    assert t.for_backend("opencl").vector_params() == ["VEC"]
    assert t.for_backend("cuda").vector_params() == []  # CUDA has no VEC
    with pytest.raises(SpaceError, match="vectors= names 'VECTOR'"):
        _make(vectors=["VECTOR"])


# -- names, by whole words ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "vector"), [
    ("VEC", True), ("VEC_SIZE", True), ("vector_width", True), ("VEC4", True), ("PACK", True), ("WIDTH", True),
    ("filter_width", False), ("TILE_WIDTH", False), ("block_size_x", False), ("VECTORIZE_LOADS", False),
    ("SPACKLE", False),
])
def test_the_vector_width_heuristic_matches_whole_words(name: str, vector: bool) -> None:
    assert VECTOR_NAME.search(name) is vector


def test_a_name_splits_into_words_at_underscores_case_changes_and_digits() -> None:
    assert words("blockSizeX") == ("block", "size", "x")
    assert words("VEC4_WIDTH") == ("vec", "4", "width")


def test_vectors_overrides_the_names() -> None:
    space = Space(filter_width=[1, 2, 4], VEC=[1, 2])
    default = {"filter_width": 1, "VEC": 1}
    assert _make(space=space, default=default, per_backend=None).vector_params() == ["VEC"]
    declared = _make(space=space, default=default, per_backend=None, vectors=["filter_width"])
    assert declared.vector_params() == ["filter_width"]


def test_the_rule_templater_reads_names_by_whole_words() -> None:
    from pytest_ktune.agent._rules import kind_of

    assert kind_of("BLOCK_SIZE") == "block" and kind_of("THREADS_PER_BLOCK") == "block"
    assert kind_of("ITEMS_PER_THREAD") == "items" and kind_of("MAX_BLOCKS") == "cap"
    assert kind_of("VEC_WIDTH") == "vector"
    # Substrings no longer count: ARROWS is no ROWS, ESCAPE no CAP, filter_width no vector width.
    assert kind_of("ARROWS") is None and kind_of("ESCAPE") is None and kind_of("filter_width") is None


# -- ktune.grid -----------------------------------------------------------------------------------


def test_grid_is_a_ceil_div_per_dimension() -> None:
    assert grid(1000, 256) == 4
    assert grid((1000, 30), (256, 8)) == (4, 4)
    assert grid((1000, 30), 256) == (4, 30)  # the block's missing dimensions are one thread wide
    assert grid((1024, 1024, 3), (32, 32, 1)) == (32, 32, 3)
    with pytest.raises(ValueError, match="a block of 2 dimensions"):
        grid(1000, (256, 2))
    with pytest.raises(ValueError, match="must be positive"):
        grid((10, 10), (0, 1))


# -- the agent's rules follow the backend's space ----------------------------------------------------

CONV_CL = """\
#define GRID_CAP 1024
__kernel void convolution(__global float* out, __global const float* x, int n) {
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) out[i] = x[i] * (float)TILE;
}
"""


def convolution_launcher(kernel: Any, x: Any) -> Any:
    out = kernel.empty_like(x)
    kernel.launch(grid=min(x.shape[0] // 64, 1024), block=64, args=[out, x, x.shape[0]])
    return out


def test_the_rule_templater_keeps_the_backends_own_parameters() -> None:
    from pytest_ktune import Source
    from pytest_ktune.agent._rules import rule_proposal

    base = target(sources={"cuda": Source("// cuda\n"), "opencl": Source(CONV_CL)},
                  space=Space(TILE=[1, 2], read_only=[0, 1]), default={"TILE": 1, "read_only": 0},
                  per_backend={"opencl": BackendSpace(drop=["read_only"], TILE=[1, 2, 4])},
                  key=lambda x: {"N": x.shape[0]}, cases=[Case(x=Tensor((4096,)))],
                  reference=lambda x: x)(convolution_launcher)
    proposal = rule_proposal(base, "opencl")
    assert "read_only" not in proposal.space and proposal.space["TILE"] == (1, 2, 4)
    assert "GRID_CAP" in proposal.space and "BLOCK" in proposal.space


def test_a_record_written_before_the_space_grew_reads_the_defaults_values_for_the_new_parameters() -> None:
    # The template gained read_only after this record was written; its default (0) is the kernel it had.
    cuda = _make().for_backend("cuda")
    assert cuda.complete({"BLOCK": 128, "TILE": 2}) == {"BLOCK": 128, "TILE": 2, "read_only": 0}
    cuda.check_config(cuda.complete({"BLOCK": 128, "TILE": 2}), {"H": 8}, "recorded configuration")
    assert cuda.complete({"BLOCK": 128, "TILE": 2, "read_only": 1}) == {"BLOCK": 128, "TILE": 2, "read_only": 1}
    # A parameter the space does not have is kept, and the check names it.
    with pytest.raises(SpaceError, match="unknown parameter WARP"):
        cuda.check_config(cuda.complete({"BLOCK": 128, "WARP": 4}), {"H": 8}, "recorded configuration")
