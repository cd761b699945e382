"""The JUnit XML report of a run (``--ktune-junit PATH``), for CI systems that read test results.

One ``testsuite`` per target and one ``testcase`` per check of it: ``correct[CASE]``,
``perf[CASE]`` and ``tune[KEY]``, with the target's id in dotted form as the
classname (``kernels/rmsnorm.py::rmsnorm`` -> ``kernels.rmsnorm.rmsnorm``), as
pytest's own report names tests. A confirmed regression is a ``failure`` whose
message carries the numbers; every testcase has ``properties``: the time, the
baseline, their ratio, the parameters (JSON), the backend, the device and the
verdict, as far as the check produced them; with ``flops=``, GFLOP/s, the
fraction of the device's multiply-add peak and the roofline side (``bound``).

The document is built with the ``junit-xml`` package; the per-testcase
properties, which that package does not write, are added to its elements.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def _properties(o: ItemOutcome, backend: str, device: str, perf: PerfResult | None,
                tune: TuneOutcome | None) -> dict[str, str]:
    verdict = {"passed": "ok", "failed": "failed", "skipped": "skipped", "error": "error"}[o.outcome]
    props: dict[str, str] = {"target": o.target, "backend": backend, "device": device}
    if perf is not None:
        props.update(backend=perf.backend or backend, device=perf.device or device, time_us=_num(perf.time_us),
                     baseline_us=_num(perf.baseline_us), ratio=_num(perf.ratio),
                     params=json.dumps(dict(perf.params), sort_keys=True))
        if o.check == "perf":
            verdict = perf.verdict
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
    from junit_xml import TestCase, TestSuite


    by_case: dict[tuple[str, str], PerfResult] = {}
    for r in results:
        by_case[(r.target_id or r.target, r.case)] = r
    by_key = {(t.target, key_string(t.key)): t for t in tunes}
    stamp = timestamp or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")

    suites: dict[str, tuple[list[Any], list[dict[str, str]]]] = {}
    for o in outcomes:
        perf = by_case.get((o.target, o.label)) or by_case.get((o.name, o.label))
        if o.check not in ("correct", "perf"):
            perf = None
        tune = by_key.get((o.name, key_string(o.key))) if o.check == "tune" and o.key is not None else None
        name = o.label if o.check == "broken" else f"{o.check}[{o.label}]"
        case = TestCase(clean(name), classname=clean(classname(o.target)), elapsed_sec=o.duration_s,
                        file=clean(o.target.rpartition("::")[0]) or None)
        message = clean(o.message)
        if o.outcome == "failed":
            kind = "regression" if o.check == "perf" and perf is not None and perf.verdict == "REGRESSION" \
                else "failure"
            case.add_failure_info(message=_first_line(message) or "failed", output=message, failure_type=kind)
        elif o.outcome == "error":
            case.add_error_info(message=_first_line(message) or "error", output=message, error_type="error")
        elif o.outcome == "skipped":
            case.add_skipped_info(message=_first_line(message) or "skipped")
        elif perf is not None and perf.note:
            case.stdout = clean(perf.note)
        cases, props = suites.setdefault(o.target, ([], []))
        cases.append(case)
        props.append(_properties(o, backend, device, perf, tune))

    root = ET.Element("testsuites", {"name": "pytest-ktune"})
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    total_time = 0.0
    host = platform.node() or None
    for target, (cases, props) in suites.items():
        suite = TestSuite(clean(target), cases, hostname=host, timestamp=stamp, package="pytest-ktune",
                          properties={"backend": clean(backend), "device": clean(device),
                                      "ktune_version": __version__})
        element = suite.build_xml_doc()
        element.set("time", f"{sum(c.elapsed_sec or 0.0 for c in cases):.6f}")
        for tc, p in zip(element.findall("testcase"), props, strict=True):
            tc.set("time", tc.get("time") or "0.000000")
            holder = ET.Element("properties")
            for prop, value in p.items():
                ET.SubElement(holder, "property", {"name": prop, "value": value})
            tc.insert(0, holder)
        for k in totals:
            totals[k] += int(element.get(k, "0"))
        total_time += float(element.get("time", "0"))
        root.append(element)
    for k, n in totals.items():
        root.set(k, str(n))
    root.set("time", f"{total_time:.6f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(path: Path, run: RunResults) -> Path:
    """Write the run's report to ``path``, atomically; returns the path."""
    text = build(run.outcomes, run.results, run.tunes, backend=run.backend, device=run.device)
    write_atomic(Path(path), text)
    return Path(path)
