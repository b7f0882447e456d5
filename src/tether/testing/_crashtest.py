"""Crash testing for your own agent: kill it at every crash point, resume it, compare.

``run_crashtest`` first runs the scenario (``_scenario.py``) once without a kill, in fresh child
processes (``_child.py``, started by ``_drive.py``), and records the baseline: the final status
and answer, the side-effect ledger, the model calls, and the crash points each process passes
(``TETHER_CRASH_TRACE``). Then, for every one of those passes, it runs the scenario again from
an empty directory with ``TETHER_CRASH_AT=POINT:N`` armed in that process, which dies there with
a real ``SIGKILL``; fresh processes resume the run until it rests. With ``double``, a sample of
cases is killed a second time, in the resuming process. Each case is compared with the baseline
(``_judge.py``), and the results make the ``Report`` (``_report.py``).

Every case has a directory of its own (laid out as ``_child.py`` says, plus ``trace-N.txt``,
the crash points process ``N`` passed). With ``store="postgresql://..."`` the runs live in that
database instead, every case (and the baseline) in a PostgreSQL schema of its own
(``crash_<random>_<case number>``, named in the case's ``schema.txt``), so cases never see each
other's runs (``_casestore.py``). Children get ``--schema NAME`` and the URL in
``TETHER_CRASHTEST_STORE`` (not on their command line, where a password would show). A killed
child's lease on the run would stay live until it ran out: the harness, which saw the child
die, ends its leases (``CaseStore.buried``), so children hold long ones (``PG_LEASE_TTL``) that
a loaded machine's stalls do not outlast, and a resuming child claims the run at once. The
schemas are dropped when their case is over, unless ``root`` is given: then they are kept with
the cases' directories.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .._failpoints import POINTS
from .._store_url import is_postgres
from ._casestore import redact_url
from ._drive import UNREACHED, CaseRun, Kill, Target, drive
from ._judge import judge
from ._report import Baseline, CaseResult, Report
from ._scenario import CrashtestError, ScenarioFactory, check_scenario, resolve_target

TRIES = 3
"""How often a case is run before it counts as ``unreached``: a process that ends cleanly before
its kill point took another path than the baseline (two runs of one process racing, say)."""


def _kills_of(points_per_process: list[list[str]]) -> list[Kill]:
    """One kill per pass of a crash point, in the order the run passes them."""
    kills = []
    for number, points in enumerate(points_per_process, start=1):
        seen: Counter[str] = Counter()
        for point in points:
            seen[point] += 1
            kills.append(Kill(number, point, seen[point]))
    return kills


def _second_kill(first: Kill, run: CaseRun) -> Kill | None:
    """A kill at a point the process resuming after ``first`` passes, half-way through."""
    if len(run.processes) <= first.process:
        return None
    after = run.processes[first.process]  # the process right after the killed one
    if not after.points:
        return None
    index = len(after.points) // 2
    point = after.points[index]
    return Kill(first.process + 1, point, after.points[: index + 1].count(point))


def _sample(items: list[tuple[Kill, Kill]], size: int) -> list[tuple[Kill, Kill]]:
    if size >= len(items):
        return list(items)
    step = len(items) / size
    return [items[int(i * step)] for i in range(size)]


def run_crashtest(
    target: str | ScenarioFactory,
    *,
    double: bool | int = False,
    workers: int = 2,
    points: Iterable[str] | None = None,
    after_deploy: bool = False,
    root: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
    store: str | None = None,
    on_case: Callable[[int, int, str], None] | None = None,
    on_start: Callable[[], None] | None = None,
) -> Report:
    """Crash-test a scenario: kill it at every crash point it passes, resume, compare.

    Args:
        target: ``"MODULE:NAME"`` or the factory itself (defined at module level in an
            importable module): ``factory(root: Path) -> Scenario``.
        double: also kill the resuming process, half-way through, for a sample of the cases:
            ``True`` for 6 of them, or the sample size.
        workers: cases run at the same time (each in its own directory).
        points: kill only at these crash points (``POINTS`` names); every point by default.
        after_deploy: kill only in the processes that run the scenario's deployed
            application (its ``deploy``), from the first one on: the crash points around a
            deploy and a repin, without the ones before it.
        root: where the cases' directories go (kept afterwards, with their PostgreSQL schemas);
            a temporary directory that is removed afterwards by default.
        progress: called with a line for each case that finished.
        on_start: called once the scenario and the options are checked, before the baseline
            runs (nothing is printed for a scenario that cannot work, say).
        on_case: called with ``(done, total, label)`` when the baseline has finished
            (``done`` 0) and each time a case finishes, ``label`` naming its kill points: what
            a progress display needs.
        store: a ``postgresql://`` URL: run every case in that database instead of a
            ``FileStore`` in its directory, each in a schema of its own, ``crash_<random>_<n>``
            (``n`` is 0 for the baseline; the case's ``schema.txt`` names it). The schemas are
            dropped as each case ends, unless ``root`` is given. Needs ``asyncpg``.

    Raises:
        CrashtestError: a bad target or store, the uninterrupted baseline run failed, or
            the scenario deploys but its baseline run never rested in flight for the deploy
            to happen (or ``after_deploy`` for a scenario without a ``deploy``), or the
            baseline passed none of the crash points asked for (no case would test anything).
    """
    started = time.monotonic()
    check_points(points)
    if store is not None:
        if not is_postgres(store):
            raise CrashtestError(f"store: expected a postgresql:// URL, got {redact_url(store)!r}")
        if importlib.util.find_spec("asyncpg") is None:
            raise CrashtestError("a PostgreSQL store needs asyncpg: pip install 'tether[postgres]'")
    spec, factory, paths = resolve_target(target)
    if root is not None and Path(root).exists() and not Path(root).is_dir():
        raise CrashtestError(f"--root {root} is not a directory: give a new or empty directory")
    if root is not None and Path(root).exists() and any(Path(root).iterdir()):
        raise CrashtestError(f"--root {root} is not empty: give a new or empty directory")
    deploys = check_scenario(spec, factory).deploy is not None
    if after_deploy and not deploys:
        raise CrashtestError(f"after_deploy: the scenario {spec} has no deploy")
    if on_start is not None:
        on_start()
    say = progress or (lambda _line: None)
    tag = secrets.token_hex(4)

    def schema(number: int, attempt: int = 1) -> str | None:
        if store is None:
            return None
        return f"crash_{tag}_{number}" + (f"_{attempt}" if attempt > 1 else "")

    with tempfile.TemporaryDirectory(prefix="tether-crashtest-") as tmp:
        tgt = Target(
            spec, factory, paths, str(Path(tmp) / "pycache"), store=store, keep=root is not None
        )
        base_dir = Path(root) if root is not None else Path(tmp)
        base_dir.mkdir(parents=True, exist_ok=True)
        base = drive(tgt, base_dir / "baseline", [], schema(0))
        if base.status == "error" or base.lost:
            raise CrashtestError(f"the baseline run failed: {'; '.join(base.problems)}")
        if deploys and base.deployed is None:
            raise CrashtestError(
                "the scenario deploys, but its baseline run never rested in flight (waiting "
                "for a person or an event) for the deploy to happen at"
            )
        say(f"baseline: {base.status}, {base.model_calls} model calls, {dict(base.ledger)}")
        kills = _kills_of([p.points for p in base.processes])
        if points is not None:
            wanted = set(points)
            kills = [k for k in kills if k.point in wanted]
        if after_deploy:
            assert base.deployed is not None
            kills = [k for k in kills if k.process >= base.deployed]
        if not kills:  # a report of no case would read "crash-safe" having tested nothing
            passed = sorted({point for p in base.processes for point in p.points})
            chosen = f"the crash points {', '.join(points)}" if points else "any crash point"
            raise CrashtestError(
                f"the baseline run never passed {chosen}"
                + (" after its deploy" if after_deploy else "")
                + f", so no case would test anything; it passed: {', '.join(passed) or 'none'}"
            )
        size = 6 if double is True else int(double)
        total = len(kills)  # the double kills are added once they are chosen
        finished = 0
        lock = threading.Lock()
        if on_case is not None:
            on_case(0, total, "baseline")

        def one(number: int, kills: tuple[Kill, ...]) -> tuple[CaseResult, CaseRun]:
            nonlocal finished
            name = "-".join(f"p{k.process}-{k.point}-{k.n}" for k in kills)
            got = drive(tgt, base_dir / name, kills, schema(number))
            for again in range(2, TRIES + 1):  # a path that depends on timing: try it again
                if got.status != UNREACHED:
                    break
                got = drive(tgt, base_dir / f"{name}-try{again}", kills, schema(number, again))
            result = judge(kills, base, got)
            say(f"{result.label}: {result.outcome}")
            with lock:
                finished += 1
                if on_case is not None:
                    on_case(finished, total, result.label)
            return result, got

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            numbers = range(1, len(kills) + 1)
            singles = list(pool.map(one, numbers, [(k,) for k in kills]))
            cases = [r for r, _ in singles]
            if size > 0:
                runs = {k: run for k, (_, run) in zip(kills, singles, strict=True)}
                pairs = [(k, _second_kill(k, runs[k])) for k in kills]
                doubles = _sample([(k, s) for k, s in pairs if s is not None], size)
                total += len(doubles)
                numbers = range(len(kills) + 1, len(kills) + 1 + len(doubles))
                cases += [r for r, _ in pool.map(one, numbers, doubles)]
    baseline = Baseline(
        status=base.status,
        final_text=base.final_text,
        ledger=dict(base.ledger),
        model_calls=base.model_calls,
        processes=len(base.processes),
        decisions=base.decisions,
        signals=base.signals,
        points=[p.points for p in base.processes],
        deployed=base.deployed,
        repins=base.repins,
    )
    where = redact_url(store) if store is not None else None
    return Report(spec, baseline, cases, time.monotonic() - started, store=where)


def check_points(points: Iterable[str] | None) -> None:
    """Raises ``CrashtestError`` naming the crash points in ``points`` that do not exist."""
    unknown = sorted(set(points or ()) - set(POINTS))
    if unknown:
        raise CrashtestError(f"unknown crash points {unknown}; known: {', '.join(POINTS)}")


def assert_crash_safe(
    target: str | ScenarioFactory,
    *,
    double: bool | int = False,
    workers: int = 2,
    points: Iterable[str] | None = None,
    after_deploy: bool = False,
    min_points: int = 1,
    root: str | os.PathLike[str] | None = None,
    store: str | None = None,
) -> Report:
    """``run_crashtest``, then raise ``AssertionError`` with the report if any case failed or
    fewer than ``min_points`` crash points were exercised. Returns the report.

    ``store`` (a ``postgresql://`` URL) runs the cases in that database, and
    ``after_deploy`` kills only from the scenario's deploy on, as ``run_crashtest`` says."""
    report = run_crashtest(
        target,
        double=double,
        workers=workers,
        points=points,
        after_deploy=after_deploy,
        root=root,
        store=store,
    )
    if not report.ok:
        raise AssertionError(report.text())
    if report.points < min_points:
        raise AssertionError(
            f"{report.text()}\n\nonly {report.points} crash point(s) exercised, "
            f"min_points={min_points}"
        )
    return report
