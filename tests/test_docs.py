"""The docs agree with the code: README's options table, docs/ci-recipe.md's table of the options a CI job
sets, its write-mode default and its workflow snippets, and every option or variable the docs name."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from pytest_ktune.backends.triton_direct import ENV as TRITON_DIRECT_ENV
from pytest_ktune.core.names import DEFAULT_WRITE
from pytest_ktune.core.options import OPTIONS, Option
from pytest_ktune.core.paths import ENV as PARAMS_ENV

ROOT = Path(__file__).resolve().parents[1]
DOCS = {name: (ROOT / name).read_text() for name in ("README.md", "docs/guide.md", "docs/ci-recipe.md")}
RECIPE = DOCS["docs/ci-recipe.md"]
BY_FLAG = {o.flag: o for o in OPTIONS}
# Variables the docs may name that are not options: read by the backends, the agent, or the workflows.
OTHER_VARIABLES = {PARAMS_ENV, TRITON_DIRECT_ENV, "KTUNE_MODEL", "KTUNE_COMPILER_OUTPUT", "KTUNE_OPENCL_DEVICE",
                   "KTUNE_AGENT_COST", "KTUNE_AGENT_TIMEOUT", "KTUNE_AGENT_TOKENS", "KTUNE_PRICE_PER_1K",
                   "KTUNE_PR_TOKEN", "KTUNE_PROJECT", "KTUNE_PLUGIN",
                   "KTUNE_HISTORY_RUNS", "KTUNE_GUARD_BYTES", "KTUNE_OCLGRIND_ICD", "KTUNE_COMPUTE_SANITIZER"}


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header line starts with ``header``, split into cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def _default_of(cell: str, o: Option) -> object:
    """What a default cell says: a `value`, none, or off."""
    m = re.match(r"`([^`]+)`", cell)
    if m:
        return m.group(1)
    word = cell.split(maxsplit=1)[0]
    assert word in ("none", "off"), cell
    return None if word == "none" else False


def _default_text(o: Option) -> object:
    if o.kind is bool:
        return False
    return None if o.default is None else str(o.default)


def test_ci_recipe_table_of_options_matches_the_code() -> None:
    rows = _table(RECIPE, "| option | environment | ini key | default |")
    assert rows
    seen = set()
    for flag_cell, env_cell, ini_cell, default_cell in rows:
        flag = flag_cell.strip("`")
        o = BY_FLAG[flag]  # a KeyError names a flag the code does not have
        seen.add(o.name)
        env = env_cell.strip("`")
        assert env == (PARAMS_ENV if o.name == "params" else o.env_name), flag
        assert o.env or o.name == "params", f"{flag}: the code reads no {env}"
        assert ini_cell.strip("`") == o.ini, flag
        assert _default_of(default_cell, o) == _default_text(o), flag
    # Every option a CI job can set from the environment is in the table.
    assert {o.name for o in OPTIONS if o.env} <= seen


def test_ci_recipe_states_the_write_modes_default() -> None:
    section = RECIPE.split("## 8. The modes of `--ktune-write`", 1)[1]
    (stated,) = re.findall(r"\(default: `(\w+)`", section)
    assert stated == DEFAULT_WRITE == BY_FLAG["--ktune-write"].default
    modes = [row[0].strip("`") for row in _table(section, "| mode |")]
    assert modes[0] == DEFAULT_WRITE and set(modes) == {"none", "file", "patch", "commit", "pr"}


def test_ci_recipe_snippets_are_the_workflows_steps() -> None:
    workflows = "\n".join(p.read_text() for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    blocks = re.findall(r"```yaml\n(.*?)```", RECIPE, flags=re.S)
    assert blocks
    for block in blocks:
        steps = yaml.safe_load(block)
        assert isinstance(steps, list)
        for step in steps:
            if "uses" in step:
                line = next(ln for ln in block.splitlines() if step["uses"] in ln)
                assert line.split("uses:", 1)[1].strip() in workflows, line  # the same SHA and release
            for key, value in (step.get("with") or {}).items():
                assert f"{key}: {value}" in workflows or key == "name" or isinstance(value, int), (key, value)
            if "run" in step:
                words = step["run"].split()
                assert all(w.split("=")[0] in BY_FLAG for w in words if w.startswith("--ktune")), step["run"]


def test_readme_options_table_matches_the_code() -> None:
    rows = _table(DOCS["README.md"], "| option | meaning |")
    named: set[str] = set()
    for option_cell, meaning in rows:
        flags = re.findall(r"--ktune[a-z-]*", option_cell)
        assert flags, option_cell
        for flag in flags:
            assert flag in BY_FLAG, flag
        named.update(flags)
        stated = re.search(r"default `([^`]+)`", meaning)
        if stated and len(flags) == 1:
            assert stated.group(1) == str(BY_FLAG[flags[0]].default), (flags[0], stated.group(1))
    assert named == set(BY_FLAG), set(BY_FLAG) - named


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_every_option_and_variable_the_docs_name_exists(doc: str) -> None:
    text = DOCS[doc]
    for flag in set(re.findall(r"--ktune[a-z-]*[a-z]", text)):
        assert flag in BY_FLAG, f"{doc} names {flag}, which pytest-ktune does not have"
    known = {o.env_name for o in OPTIONS if o.env} | OTHER_VARIABLES
    for name in set(re.findall(r"KTUNE_[A-Z0-9_]*[A-Z0-9]", text)):
        assert name in known, f"{doc} names {name}, which nothing reads"


_LAYERS = "core|backends|measure|gate|tuner|report|agent|lab|writeback|run|items|plugin|cli|hookspecs|testing"


def _names_nothing(dotted: str) -> bool:
    """Whether ``dotted`` (``run.config.resolve``) names no module, class, function or attribute of the package."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module("pytest_ktune." + ".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return True
            obj = getattr(obj, attr)
        return False
    return True


def test_every_module_the_architecture_names_exists() -> None:
    # The map's walks name modules and functions (`run.config.resolve`); a rename leaves none behind.
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(rf"`((?:{_LAYERS})(?:\.\w+)+)`", text))
    assert {"run.config.resolve", "gate.verdict.Gate.judge"} <= named
    assert sorted(n for n in named if not n.endswith(".py") and _names_nothing(n)) == []
    assert _names_nothing("run.config.merge_everything")


def test_no_text_file_holds_an_unresolved_merge() -> None:
    """A merge's conflict markers left in a committed file (docs/architecture.md held one once)."""
    files = subprocess.run(["git", "ls-files", "*.md", "*.py", "*.toml", "*.yml", "*.yaml", "*.cu", "*.cl", "*.sh"],
                           cwd=ROOT, capture_output=True, text=True, check=False).stdout.split()
    if not files:
        pytest.skip("not a git checkout: no list of committed files")
    marker = re.compile(r"^(<{7} |>{7} |={7}$)", re.MULTILINE)
    bad = [f for f in files if (ROOT / f).is_file() and marker.search((ROOT / f).read_text(errors="replace"))]
    assert not bad, f"unresolved merge markers in {bad}"
