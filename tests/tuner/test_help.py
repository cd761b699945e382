"""Each interface names its own flags: pytest's messages and --help its --ktune-* flags, the ktune
command's its own (--write, --storage, --model); every option says its default once."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from pytest_ktune.cli import _TEMPLATIZE_FLAGS, _parser, main
from pytest_ktune.run.config import cli_text


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_each_option_of_the_command_says_its_default_once_and_names_its_own_flags(command: str) -> None:
    parser = _subparsers()[command]
    for action in parser._actions:
        text = _flat(action.help or "")
        assert text.count("(default") <= 1, (command, action.option_strings, text)
        # pytest's flag appears only where the help says what it is under pytest
        rest = re.sub(r"\[--ktune-[a-z-]+ under pytest[^\]]*\]", "", text)
        rest = re.sub(r"pytest's --ktune-[a-z-]+|pytest --ktune(?: --ktune-[a-z-]+)?", "", rest)
        assert "--ktune-" not in rest, (command, action.option_strings, text)


def test_pytests_help_says_each_default_once(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.split("(pytest-ktune):", 1)[1].splitlines()[1:]
    section = _flat("\n".join(lines[:next(i for i, line in enumerate(lines) if not line.startswith(" "))]))
    assert "(default: none) (default: none)" not in section
    assert "(default: a new one each run, which pytest's header shows) [ini: ktune_seed" in section
    for entry in re.split(r"\s(?=--ktune)", section):
        assert entry.count("(default") <= 1, entry


def test_templatize_help_names_the_key_and_the_rule_based_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["templatize", "--help"])
    text = _flat(capsys.readouterr().out)
    assert "OPENAI_API_KEY" in text and "OPENAI_BASE_URL" in text
    assert "Without --model the rule-based templater runs alone (no model, no network)" in text


def test_export_help_says_the_header_is_cpp17(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    assert "C++17" in _flat(capsys.readouterr().out)


def test_messages_written_for_pytest_name_the_commands_flags() -> None:
    from pytest_ktune.writeback.deliver import WriteRequest, builtin_write_back

    none = builtin_write_back("none")
    assert none is not None
    winner = types.SimpleNamespace(changes=("a change",), record="a record")  # what .winners asks of an outcome
    line = none(WriteRequest(mode="none", root=Path(), params_path=Path("p.json"), outcomes=(winner,),  # type: ignore[arg-type]
                             device="d", command="", copy_bandwidth=lambda: None))
    assert line.startswith("1 tuned winner(s) NOT written (--ktune-write=none, the default)")
    assert cli_text(line).startswith("1 tuned winner(s) NOT written (--write=none, the default): rerun with "
                                     "--write=file, patch, commit or pr")
    assert cli_text("rerun with --ktune-write=file, patch") == "rerun with --write=file, patch"
    assert cli_text("a shared --ktune-storage and `ktune worker`") == "a shared --storage and `ktune worker`"
    # pytest's flags that the command has none of stay as they are
    assert cli_text("pytest --ktune --ktune-update-baseline") == "pytest --ktune --ktune-update-baseline"
    assert cli_text("raise --ktune-agent-wall or --ktune-agent-memory", _TEMPLATIZE_FLAGS) == \
        "raise --wall or --memory"


def test_templatize_says_its_own_model_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "KTUNE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    code = main(["templatize", str(tmp_path / "k.cl"), "--target", "k", "--model", "some-model",
                 "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "or leave --model unset for the rule-based templater" in err and "--ktune-model" not in err


def test_tune_says_its_own_agent_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "KTUNE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    code = main(["tune", "--agent", "--model", "some-model", "--root", str(tmp_path), "--backend", "opencl"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines()[1].startswith("error: --agent: model 'some-model' is named") and "--ktune-" not in err
