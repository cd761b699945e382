"""One study shared through a real PostgreSQL server: a ``ktune tune`` coordinator and two
``ktune worker`` processes run it at the same time, on PoCL's CPU device, in one project."""

from __future__ import annotations

import ast
import re

from plugin._kit import Project

from ._tk import Cli, config_text, decode, finish, only_study, repeat_target, summaries, timed

BUDGET = 12
WORKERS = 2
SPACE = {"BLOCK": (64, 128, 256), "REPEAT": (1, 2, 4, 8, 16, 32, 64, 128)}


def test_a_coordinator_and_two_workers_share_one_study(project: Project, cli: Cli,
                                                       postgres_fresh_url: str) -> None:
    project.write(repeat_target(repeats=SPACE["REPEAT"], blocks=SPACE["BLOCK"],
                                default="{'BLOCK': 64, 'REPEAT': 128}"))
    url = postgres_fresh_url
    # Everything starts at once, on an empty database: the workers wait for the study to appear.
    workers = [cli.start("worker", "--storage", url) for _ in range(WORKERS)]
    coordinator = cli.start("tune", "--write", "file", "--storage", url, "--trials", str(BUDGET))
    try:
        code, out, err = finish(coordinator, timeout=240)
        assert code == 0, out + err
        # A worker exits once the budget is spent and no other study shows up for a while.
        ran = []
        for w in workers:
            w_code, w_out, w_err = finish(w, timeout=120)
            assert w_code == 0, w_out + w_err
            (count,) = re.findall(r"^worker \d+: (\d+) timed trials$", w_out, flags=re.MULTILINE)
            ran.append(int(count))
    finally:
        for proc in [*workers, coordinator]:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    name, trials = only_study(url)
    assert re.fullmatch(r"scale-N4096-[0-9a-f]{10}", name)
    done = timed(trials)
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    # No configuration was timed twice, and the budget was met without running far past it.
    configs = [config_text(decode(t, SPACE)) for t in done]
    assert len(set(configs)) == len(configs), sorted(configs)
    assert BUDGET <= len(done) <= BUDGET + WORKERS
    # The workers did part of the work.
    assert sum(ran) >= 1 and sum(ran) < len(done), ran

    # The coordinator chose the best of all the timed trials (its own and the workers'), and wrote it.
    best = min(done, key=lambda t: (t.value, t.number))
    (line,) = summaries(out)
    assert ast.literal_eval(line["params"]) == decode(best, SPACE)
    assert float(line["us"]) == round(best.value or 0.0, 2)
    assert line["written"] == "to be delivered (--write file)"
    (record,) = project.records()
    assert record["params"] == decode(best, SPACE)
    assert record["tuned"]["study"] == name
