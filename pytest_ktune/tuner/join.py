"""Joining studies in a shared storage: `ktune worker`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pytest_ktune import backends
from pytest_ktune.core.discover import import_file
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.target import Target
from pytest_ktune.core.text import first_line as _first_line
from pytest_ktune.measure.worker import TargetRef, WorkerPool, WorkerSpec
from pytest_ktune.tuner.encoding import Encoding, stored_mode
from pytest_ktune.tuner.loop import StudyLoop
from pytest_ktune.tuner.samplers import make_sampler
from pytest_ktune.tuner.settings import TuneSettings
from pytest_ktune.tuner.storage import open_storage


def join_studies(root: Path, settings: TuneSettings, names: Sequence[str] | None, *, backend: str,
                 wait_s: float = 30.0) -> int:
    """Run trials for the pytest-ktune studies in ``settings.storage`` until their budgets are spent.

    Each study names its target, key and budget (set by the ``ktune tune`` that created it); only
    studies for this worker's device are joined. Returns the trials this worker timed.
    """
    import optuna


    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage, storage_name = open_storage(settings.storage, root / ".ktune")
    backend = backends.resolve(backend)
    timed = 0
    waited_since = time.monotonic()
    finished: set[str] = set()
    while True:
        try:
            summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
        except Exception as exc:
            raise KtuneError(f"cannot list the studies in {storage_name}: {type(exc).__name__}: "
                             f"{_first_line(str(exc))}", hint="check the storage URL and the server") from None
        open_studies = [s for s in summaries if "ktune" in s.user_attrs and s.study_name not in finished
                        and (not names or s.study_name in names) and s.user_attrs["ktune"]["backend"] == backend]
        if not open_studies:
            if time.monotonic() - waited_since > wait_s:
                return timed
            time.sleep(0.5)
            continue
        for summary in open_studies:
            attrs = summary.user_attrs["ktune"]
            module = import_file(Path(attrs["file"]) if Path(attrs["file"]).is_absolute()
                                 else root / attrs["file"])
            target = next((v for v in vars(module).values() if isinstance(v, Target)
                           and v.name == attrs["name"]), None)
            if target is None:
                raise KtuneError(f"the study {summary.study_name!r} names target {attrs['name']} in "
                                 f"{attrs['file']}, which this checkout does not define",
                                 hint="run the worker from the same revision of the project")
            spec = WorkerSpec(target=TargetRef.of(target), backend=backend, cases=tuple(attrs["cases"]),
                              cache_dir=str(root / ".ktune" / "cache" / backend))
            enc = Encoding.for_sampler(target, settings.sampler, stored_mode(storage, summary.study_name))
            study = optuna.load_study(study_name=summary.study_name, storage=storage,
                                      sampler=make_sampler(settings.sampler, settings.seed, enc,
                                                           list(target.space.feasible(attrs["key"]))))
            budget = replace(settings, trials=int(attrs["trials"]))
            with WorkerPool(spec, trial_timeout_s=settings.trial_timeout_s) as pool:
                pool.ensure()
                if pool.device.id != attrs["device"]:
                    finished.add(summary.study_name)
                    continue
                loop = StudyLoop(study, enc, target, key=attrs["key"], pool=pool, settings=budget)
                before = sum(1 for r in loop.rows if r.state == "timed")
                loop.run(None)
                timed += sum(1 for r in loop.rows if r.state == "timed") - before
            finished.add(summary.study_name)
            waited_since = time.monotonic()
