"""The JUnit XML report of a run (``--ktune-junit PATH``), for CI systems that read test results.

The document is valid against the JUnit 10 schema (the one pytest checks its own xunit2 reports
against; tests/data/junit-10.xsd). One ``testsuite`` per target and one ``testcase`` per check of
it: ``correct[CASE]``, ``perf[CASE]`` and ``tune[KEY]``, with the target's id in dotted form as the
classname (``kernels/rmsnorm.py::rmsnorm`` -> ``kernels.rmsnorm.rmsnorm``), as pytest's own report
names tests. Times have three decimals, as the schema's time type allows. With ``flops=``, a
performance testcase's numbers include GFLOP/s, the fraction of the device's multiply-add peak and
the roofline side (``bound``).

* A confirmed regression is a ``failure`` of type ``regression`` whose message carries the numbers;
  a check that could not run to its end (an error) is a ``failure`` of type ``error`` (the schema
  has no ``error`` element); a skip is ``skipped`` with its reason.
* The schema allows properties only on a testsuite, so each testcase's numbers are properties of
  its target's suite named ``TESTCASE.NAME`` (``perf[small].time_us``): the time, the baseline,
  their ratio (always ``time_us / baseline_us``), the A/B ratio where an A/B ran, the parameters
  (JSON), the verdict and the note of the check itself. The testcase's ``system-out`` says the same
  in a line for people.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_ktune.core.files import write_atomic
from pytest_ktune.core.keys import key_string
from pytest_ktune.core.text import first_line as _first_line
from pytest_ktune.core.version import __version__
from pytest_ktune.report.results import ItemOutcome, RunResults

if TYPE_CHECKING:
    from pytest_ktune.gate.verdict import PerfResult
    from pytest_ktune.tuner.outcome import TuneOutcome


# Characters XML 1.0 does not allow, and terminal colour codes.
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def clean(text: str) -> str:
    """``text`` with colour codes and characters XML cannot hold removed."""
    return _ILLEGAL.sub("", _ANSI.sub("", text))


def classname(target_id: str) -> str:
    """``dir/file.py::name`` -> ``dir.file.name``: JUnit readers group classnames by their dots."""
    file, sep, name = target_id.rpartition("::")
    if not sep:
        return target_id
    module = file[: -len(".py")] if file.endswith(".py") else file
    return ".".join(p for p in [*module.replace("\\", "/").split("/"), name] if p)


def _num(v: float | None, digits: int = 4) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def _time(seconds: float) -> str:
    return f"{max(seconds, 0.0):.3f}"


def _properties(o: ItemOutcome, perf: PerfResult | None, tune: TuneOutcome | None) -> dict[str, str]:
    """The numbers of one testcase: only what its own check produced."""
    verdict = {"passed": "ok", "failed": "failed", "skipped": "skipped", "error": "error"}[o.outcome]
    props: dict[str, str] = {}
    if perf is not None:
        props["params"] = json.dumps(dict(perf.params), sort_keys=True)
    if perf is not None and o.check == "perf" and perf.device:
        props["device"] = perf.device  # over several devices, the one this case ran on
    if perf is not None and o.check == "perf":
        verdict = perf.verdict
        ratio = perf.time_us / perf.baseline_us if perf.time_us is not None and perf.baseline_us else None
        props.update(time_us=_num(perf.time_us), baseline_us=_num(perf.baseline_us), ratio=_num(ratio))
        if perf.ratio is not None and ratio is not None and abs(perf.ratio - ratio) > 5e-5:
            props["ab_ratio"] = _num(perf.ratio)  # the A/B's, when it confirmed or cleared a suspect
        if perf.gbps is not None:
            props["gbps"] = _num(perf.gbps, 2)
        props.update(_rate_properties(perf))
        if perf.note:
            props["note"] = perf.note
    if tune is not None:
        ratio = tune.best_us / tune.current_us if tune.current_us else None
        props.update(time_us=_num(tune.best_us), baseline_us=_num(tune.current_us), ratio=_num(ratio),
                     params=json.dumps(dict(tune.best_params), sort_keys=True), decision=tune.decision,
                     trials=str(tune.timed))
        if o.outcome == "passed":
            verdict = ("written" if tune.written else "accepted") if tune.accepted else "kept"
    if o.key is not None:
        props["key"] = json.dumps(dict(o.key), sort_keys=True)
    props["verdict"] = verdict
    return {k: clean(v) for k, v in props.items()}


def _summary(props: dict[str, str]) -> str:
    """The testcase's numbers in one line for people (its system-out)."""
    order = ("time_us", "baseline_us", "ratio", "ab_ratio", "gbps", "params", "verdict", "note", "decision")
    return "; ".join(f"{k} {props[k]}" for k in order if props.get(k))
def _rate_properties(perf: PerfResult) -> dict[str, str]:
    """GFLOP/s, the fraction of the multiply-add peak and the roofline side, where flops= gave them."""
    rate = perf.rate
    if rate is None:
        return {}
    props = {"gflops": _num(rate.gflops, 2)}
    if rate.peak_fraction is not None:
        props["peak_fraction"] = _num(rate.peak_fraction, 4)
    if rate.bound is not None:
        props["bound"] = rate.bound
    return props


def build(outcomes: Iterable[ItemOutcome], results: Sequence[PerfResult] = (), tunes: Sequence[TuneOutcome] = (),
          *, backend: str = "", device: str = "", timestamp: str | None = None) -> str:
    """The report's XML text: a ``testsuites`` document, one ``testsuite`` per target."""
    by_case: dict[tuple[str, str], PerfResult] = {}
    for r in results:
        by_case[(r.target_id or r.target, r.case)] = r
    by_key = {(t.target, key_string(t.key)): t for t in tunes}
    stamp = timestamp or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    host = platform.node() or ""

    suites: dict[str, list[tuple[ItemOutcome, str, dict[str, str]]]] = {}
    for o in outcomes:
        perf = by_case.get((o.target, o.label)) or by_case.get((o.name, o.label)) \
            if o.check in ("correct", "perf") else None
        tune = by_key.get((o.name, key_string(o.key))) if o.check == "tune" and o.key is not None else None
        name = o.label if o.check == "broken" else f"{o.check}[{o.label}]"
        suites.setdefault(o.target, []).append((o, clean(name), _properties(o, perf, tune)))

    root = ET.Element("testsuites", {"name": "pytest-ktune"})
    totals = dict.fromkeys(("tests", "failures", "errors"), 0)
    total_time = 0.0
    for target, cases in suites.items():
        failures = sum(o.outcome in ("failed", "error") for o, _, _ in cases)
        skipped = sum(o.outcome == "skipped" for o, _, _ in cases)
        seconds = sum(o.duration_s for o, _, _ in cases)
        suite = ET.SubElement(root, "testsuite", {
            "name": clean(target), "tests": str(len(cases)), "failures": str(failures), "errors": "0",
            "skipped": str(skipped), "time": _time(seconds), "timestamp": stamp, "hostname": clean(host),
            "package": "pytest-ktune"})
        holder = ET.SubElement(suite, "properties")
        shared = {"backend": backend, "device": device, "ktune_version": __version__, "target": target}
        for prop, value in shared.items():
            ET.SubElement(holder, "property", {"name": prop, "value": clean(value)})
        for _, name, props in cases:
            for prop, value in props.items():
                ET.SubElement(holder, "property", {"name": f"{name}.{prop}", "value": value})
        for o, name, props in cases:
            case = ET.SubElement(suite, "testcase", {"name": name, "classname": clean(classname(o.target)),
                                                     "time": _time(o.duration_s)})
            message = clean(o.message)
            if o.outcome in ("failed", "error"):
                kind = "error" if o.outcome == "error" else \
                    "regression" if props.get("verdict") == "REGRESSION" else "failure"
                failure = ET.SubElement(case, "failure", {"type": kind,
                                                          "message": _first_line(message) or o.outcome})
                failure.text = message
            elif o.outcome == "skipped":
                ET.SubElement(case, "skipped", {"message": _first_line(message) or "skipped"})
            ET.SubElement(case, "system-out").text = _summary(props)
        totals["tests"] += len(cases)
        totals["failures"] += failures
        total_time += seconds
    for k, n in totals.items():
        root.set(k, str(n))
    root.set("time", _time(total_time))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(path: Path, run: RunResults) -> Path:
    """Write the run's report to ``path``, atomically; returns the path."""
    text = build(run.outcomes, run.results, run.tunes, backend=run.backend, device=run.device)
    write_atomic(Path(path), text)
    return Path(path)
