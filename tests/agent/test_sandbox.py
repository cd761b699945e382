"""The proposal sandbox on its own: which includes a source may have, where headers are found, what the
model is told, and where a template may be written. No device is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ktune.agent._includes import directives, headers_for
from pytest_ktune.agent._messages import compile_log, for_model
from pytest_ktune.agent._proposal import ProposalError

SECRET = "sk-outside-0123456789abcdef"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """proj/kernels/ with two headers, and a secret file outside the project."""
    kernels = tmp_path / "proj" / "kernels"
    (kernels / "sub").mkdir(parents=True)
    (kernels / "common.clh").write_text('#include "sub/inner.clh"\n#define ONE 1\n')
    (kernels / "sub" / "inner.clh").write_text("#define TWO 2\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text(f"OPENAI_API_KEY={SECRET}\n")
    return kernels


def _refused(source: str, kernels: Path, *, backend: str = "opencl") -> str:
    with pytest.raises(ProposalError) as info:
        headers_for(source, kernels, [kernels], backend=backend)
    text = info.value.message + info.value.hint
    assert str(kernels.parent.parent) not in text and SECRET not in text  # no path of this machine, no secret
    return info.value.message


@pytest.mark.parametrize(("source", "why"), [
    ('#include "../../outside/secret.txt"\n', "not a plain relative name"),
    ('#include "/proc/self/environ"\n', "not a plain relative name"),
    ('#if 0\n#include "../../../../proc/self/environ"\n#endif\n', "not a plain relative name"),
    ('#define P "/proc/self/environ"\n#include P\n', "does not name its file literally"),
    ('%:include "../secret.txt"\n', "not a plain relative name"),
    ('??=include "../secret.txt"\n', "not a plain relative name"),
    ('#inc\\\nlude "../secret.txt"\n', "not a plain relative name"),
    ('# /* hidden */ include "/etc/passwd"\n', "not a plain relative name"),
    ('/* a comment "\n#include "/etc/passwd"\n*/\n', "not a plain relative name"),
    ('const char* s = "#include \\"/etc/passwd\\"";\n', "does not name its file literally"),
    ("#include_next </etc/passwd>\n", "angle-bracket"),
    ("#embed \"/etc/passwd\"\n", "not a plain relative name"),
    ('#if __has_include("/etc/passwd")\n#endif\n', "not a plain relative name"),
    ('#pragma GCC dependency "/etc/passwd"\n', "pragma that names a dependency"),
    ('_Pragma("GCC dependency \\"/etc/passwd\\"")\n', "pragma that names a dependency"),
    ("#include <stdio.h>\n", "angle-bracket (system) header is not allowed for opencl"),
    ('#include "missing.clh"\n', "no such header beside the kernel (the headers there: common.clh)"),
])
def test_an_include_that_could_reach_outside_is_refused_before_anything_is_read(tree: Path, source: str,
                                                                                why: str) -> None:
    assert why in _refused(source, tree)


def test_a_link_out_of_the_folder_and_a_binary_file_are_refused(tree: Path) -> None:
    (tree / "link.clh").symlink_to(tree.parent.parent / "outside" / "secret.txt")
    assert "leads outside the kernel's folder" in _refused('#include "link.clh"\n', tree)
    (tree / "blob.clh").write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe" * 10)
    assert "is not a text file" in _refused('#include "blob.clh"\n', tree)


def test_headers_beside_the_kernel_are_found_with_theirs(tree: Path) -> None:
    found = headers_for('// #include "common.clh" in a comment is checked too\n#include "common.clh"\n', tree,
                        [tree], backend="opencl")
    assert {p.relative_to(tree).as_posix() for p in found} == {"common.clh", "sub/inner.clh"}
    # CUDA's own headers may be named in angle brackets, by a plain name
    assert [i.name for i in directives("#include <cuda_fp16.h>\n", backend="cuda")] == ["cuda_fp16.h"]
    assert "not a plain relative name" in _refused("#include <../../x.h>\n", tree, backend="cuda")


def test_what_the_model_is_told_names_no_path_of_this_machine(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    text = f"cannot read {root}/kernels/k.cl nor /home/someone/.cache/pocl/x.cl; a / b and (x)/8 stay"
    assert for_model(text, root) == "cannot read kernels/k.cl nor <path>; a / b and (x)/8 stay"


def test_a_compile_log_is_cut_to_the_proposals_own_lines() -> None:
    source = '#include "/scratch/p-1/headers/common.clh"\n__kernel void k(__global float* o) {\n  o[0] = bad;\n}\n'
    log = ("error: /scratch/p-1/headers/common.clh:1:1: unknown type name 'OPENAI_API_KEY'\n"
           "error: /home/me/.cache/pocl/kcache/tempfile_1H.cl:3:10: use of undeclared identifier 'bad'\n"
           "(options: -DBLOCK=64 -I/scratch/p-1)\n")
    out = compile_log(log, source, "k_proposal.cl", {"common.clh"})
    assert out.splitlines()[:2] == ["k_proposal.cl:3:10: error: use of undeclared identifier 'bad'",
                                    "      3 |   o[0] = bad;"]
    assert "1 diagnostic(s) inside included headers, not shown" in out
    assert "OPENAI_API_KEY" not in out and "/" not in out.replace("k_proposal.cl", "")
