"""An agent's template travels as tuned records do: the write-back's modes deliver its new files and its
records together, in place, as a patch or as a commit, and never replace a file of the user's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_ktune.core.store import Record, Tuned
from pytest_ktune.tuner.outcome import TemplateChange
from pytest_ktune.writeback.change import WritebackError
from pytest_ktune.writeback.deliver import WriteRequest, builtin_write_back

from ._kit import OLD_PARAMS, State, git, make_repo

TEMPLATE_CL = "__kernel void scale(__global float* out) { out[get_global_id(0)] = 1.0f; }\n"
TEMPLATE_PY = "# the template's @ktune.target\n"
TARGET = "kernels/scale_tpl.py::scale_tpl"


def template() -> TemplateChange:
    record = Record(target=TARGET, device="pocl", key={"N": 4096}, params={"BLOCK": 128},
                    tuned=Tuned(date="2026-12-02T00:00:00Z", sampler="bo", trials=3, study="s",
                                result="agent revision 1: faster"))
    return TemplateChange(target="scale", files={"kernels/scale_tpl.cl": TEMPLATE_CL,
                                                 "kernels/scale_tpl.py": TEMPLATE_PY},
                          records=(record,), summary="scale: revision 1 is faster: x1.5 side by side.")


def request(root: Path, mode: str) -> WriteRequest:
    return WriteRequest(mode=mode, root=root, params_path=root / "ktune-params.json", outcomes=(), device="pocl",
                        command="pytest --ktune --ktune-tune --ktune-agent", copy_bandwidth=lambda: None,
                        templates=(template(),))


def deliver(root: Path, mode: str) -> str:
    write_back = builtin_write_back(mode)
    assert write_back is not None
    return write_back(request(root, mode))


def outside_scratch(state: State) -> dict[str, bytes]:
    return {k: v for k, v in state.files.items() if not k.startswith(".ktune/")}


def test_a_template_travels_as_a_patch(repo: Path) -> None:
    before = State.of(repo)
    line = deliver(repo, "patch")
    after = State.of(repo)
    # The checkout is as it was: only the patch, under .ktune/, is new.
    assert outside_scratch(after) == before.files and after.head == before.head and after.index == before.index
    (patch,) = (repo / ".ktune" / "patches").iterdir()
    assert line.startswith(f"patch written to {patch}")
    text = patch.read_text()
    assert "diff --git a/kernels/scale_tpl.cl b/kernels/scale_tpl.cl\nnew file mode 100644" in text
    assert "diff --git a/kernels/scale_tpl.py b/kernels/scale_tpl.py\nnew file mode 100644" in text
    git(repo, "apply", str(patch))
    assert (repo / "kernels" / "scale_tpl.cl").read_text() == TEMPLATE_CL
    (record,) = json.loads((repo / "ktune-params.json").read_text())["records"]
    assert record["target"] == TARGET and record["params"] == {"BLOCK": 128}


def test_a_template_travels_as_a_commit(repo: Path) -> None:
    before = State.of(repo)
    line = deliver(repo, "commit")
    assert outside_scratch(State.of(repo)) == before.files
    branch = line.split("on the new branch ")[1].split(";")[0]
    assert git(repo, "show", f"{branch}:kernels/scale_tpl.py") == TEMPLATE_PY
    message = git(repo, "log", "-1", "--format=%B", branch)
    assert message.startswith("ktune: tuned scale on pocl") and "scale: a verified template" in message
    assert "`kernels/scale_tpl.cl`" in message
    assert TARGET in git(repo, "show", f"{branch}:ktune-params.json")


def test_a_template_in_place_is_written_beside_its_records(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r", files={"ktune-params.json": OLD_PARAMS})
    line = deliver(root, "file")
    assert line == (f"templates: wrote kernels/scale_tpl.cl, kernels/scale_tpl.py; wrote 1 tuned record(s) to "
                    f"{root / 'ktune-params.json'}")
    assert (root / "kernels" / "scale_tpl.py").read_text() == TEMPLATE_PY


def test_file_mode_never_replaces_a_file_the_template_would_add(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r", files={"ktune-params.json": OLD_PARAMS, "kernels/scale_tpl.py": "mine\n"})
    with pytest.raises(WritebackError, match=r"kernels/scale_tpl.py exists with another text; nothing was written"):
        deliver(root, "file")
    assert (root / "kernels" / "scale_tpl.py").read_text() == "mine\n"
    assert not (root / "kernels" / "scale_tpl.cl").exists()
    assert (root / "ktune-params.json").read_text() == OLD_PARAMS
