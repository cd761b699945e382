"""A source that #defines a macro ktune passes with -D: found with its file and line, unless guarded."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ktune.core.macros import redefinitions, scan


def _names(text: str, names: tuple[str, ...] = ("BLOCK", "image_height")) -> list[tuple[str, int]]:
    return [(r.name, r.line) for r in scan(Path("k.cl"), text, names)]


def test_an_unguarded_define_is_found_with_its_line() -> None:
    text = "// a kernel\n#define image_height 4096\n#define OTHER 3\n  #  define BLOCK (128)\n"
    assert _names(text) == [("image_height", 2), ("BLOCK", 4)]


@pytest.mark.parametrize("text", [
    "#ifndef BLOCK\n#define BLOCK 128\n#endif\n",
    "#if !defined(BLOCK)\n#define BLOCK 128\n#endif\n",
    "#if ! defined BLOCK // a default\n#define BLOCK 128\n#endif\n",
    "#ifdef BLOCK\n#else\n#define BLOCK 128\n#endif\n",
    "#ifndef OUTER\n#ifndef BLOCK\n#define BLOCK 128\n#endif\n#endif\n",
    "/* #define BLOCK 1\n   still a comment */\n// #define BLOCK 2\n",
])
def test_a_guarded_or_commented_define_is_a_default_not_an_override(text: str) -> None:
    assert _names(text) == []


@pytest.mark.parametrize(("text", "line"), [
    ("#ifndef BLOCK\n#else\n#define BLOCK 128\n#endif\n", 3),  # defined: this branch overrides it
    ("#ifndef OTHER\n#define BLOCK 128\n#endif\n", 2),  # guarded by the wrong name
    ("#undef BLOCK\n#define BLOCK 128\n", 2),
    ("#if X > 1\n#define BLOCK 64\n#elif !defined(BLOCK)\n#endif\n#define \\\n  BLOCK 2\n", 2),
])
def test_a_define_that_wins_over_the_command_line_is_found(text: str, line: int) -> None:
    assert _names(text)[0] == ("BLOCK", line)


def test_a_continued_line_is_named_by_its_first_line() -> None:
    assert _names("int x;\n#define \\\n  BLOCK 2\n") == [("BLOCK", 2)]


def test_the_files_a_source_includes_are_searched_too(tmp_path: Path) -> None:
    (tmp_path / "conf.clh").write_text("#pragma once\n#define image_height 4096\n")
    source = tmp_path / "conv.cl"
    text = '#include "conf.clh"\n__kernel void k() {}\n'
    found = redefinitions(source, text, ["image_height", "BLOCK"])
    assert [(r.name, r.path, r.line) for r in found] == [("image_height", tmp_path / "conf.clh", 2)]
    assert found[0].render() == f"{tmp_path / 'conf.clh'}:2: #define image_height 4096"
    assert redefinitions(source, text, []) == []


def test_a_header_edited_while_the_source_stays_the_same_is_read_again(tmp_path: Path) -> None:
    (tmp_path / "conf.clh").write_text("#pragma once\n")
    source = tmp_path / "conv.cl"
    text = '#include "conf.clh"\n__kernel void k() {}\n'
    assert redefinitions(source, text, ["BLOCK"]) == []
    (tmp_path / "conf.clh").write_text("#pragma once\n#define BLOCK 64\n")  # a long-running process
    assert [(r.name, r.line) for r in redefinitions(source, text, ["BLOCK"])] == [("BLOCK", 2)]
