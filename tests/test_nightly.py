"""`regress nightly` end to end on the CPU backend: stack → build → suites → store → bundle."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from regress.cli import main
from regress.facts.bundle import read_bundle
from regress.run.nightly import NightlyOptions, run_nightly
from regress.store import Case, Result, Run, Stack
from regress.store.repo import open_store


def _opts(db_url: str, tmp_path: Path, **kw: object) -> NightlyOptions:
    base: dict[str, object] = {"backend": "cpu", "quick": True, "db": db_url, "out": tmp_path / "out"}
    base.update(kw)
    return NightlyOptions(**base)  # type: ignore[arg-type]


@pytest.mark.e2e
def test_quick_nightly_stores_every_suite_mode_and_layout(db_url: str, tmp_path: Path) -> None:
    first = run_nightly(_opts(db_url, tmp_path, suites=("determinism", "ulp", "perf")))
    assert first.exit_code == 0, first.summary
    second = run_nightly(_opts(db_url, tmp_path, suites=("perf",)))
    assert second.exit_code == 0
    store = open_store(db_url)
    try:
        with store.reader() as s:
            runs = s.scalars(select(Run).order_by(Run.started_at)).all()
            assert [r.status for r in runs] == ["complete", "complete"]
            assert runs[0].stack_id == runs[1].stack_id  # same machine, same digest
            assert s.scalar(select(func.count()).select_from(Stack)) == 1
            rows = s.execute(
                select(Case.suite, Case.mode, Case.layout).join(Result, Result.case_id == Case.id)
            ).all()
        perf = {(m, lay) for suite, m, lay in rows if suite == "perf"}
        assert perf == {(m, lay) for m in ("rtne", "rtna", "rtz") for lay in ("bshd", "bhsd")}
        assert {suite for suite, _, _ in rows} == {"determinism", "ulp", "perf"}
    finally:
        store.engine.dispose()
    assert first.bundle_path is not None
    bundle = read_bundle(first.bundle_path)
    assert bundle["run"]["id"] == first.run_id
    # a dense case: no baseline takes a varlen batch (ABI v2), so those store no baseline samples
    perf_result = next(r for r in bundle["results"] if r["suite"] == "perf" and "seqs" not in r["params"])
    assert len(perf_result["samples"]["time_ms"]) >= 5
    assert any(k.startswith("baseline:") for k in perf_result["samples"])


def test_unknown_suite_is_refused_before_anything_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    assert main(["nightly", "--backend", "cpu", "--suites", "perf,bogus", "--db", db]) == 2
    assert "bogus" in capsys.readouterr().err
    assert not (tmp_path / "r.db").exists()


def test_a_suite_named_twice_is_refused_before_anything_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--suites perf,perf` ran perf twice into one run: a traceback at the store's unique case key
    and an incomplete run left behind."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    assert main(["nightly", "--backend", "cpu", "--suites", "perf,ulp,perf", "--db", db]) == 2
    assert "--suites names perf twice" in capsys.readouterr().err
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["nightly", "--backend", "cpu", "--case-timeout", "nan"], "--case-timeout"),
        (["nightly", "--backend", "cpu", "--case-timeout", "inf"], "--case-timeout"),
        (["gate", "--baseline", "a", "--candidate", "b", "--max-mde", "nan"], "--max-mde"),
    ],
)
def test_non_finite_numbers_are_refused_where_a_range_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], option: str
) -> None:
    """nan passes every range check (its comparisons are false): --max-mde nan turned the gate's
    power check off, --case-timeout nan the watchdog."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    assert main([*args, "--db", db]) == 2
    err = capsys.readouterr().err
    assert option in err and "is not a finite number" in err
    assert not (tmp_path / "r.db").exists()


@pytest.mark.e2e
def test_sharded_run_merges_two_workers_into_one_run(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    outcome = run_nightly(_opts(db, tmp_path, suites=("perf", "ulp"), gpus="0,1", iterations=5))
    assert outcome.exit_code == 0, outcome.summary
    store = open_store(db)
    with store.reader() as s:
        results = s.scalars(select(Result)).all()
        run = s.scalars(select(Run)).one()
    workers = {r.device.get("worker") for r in results}
    assert workers == {0, 1}
    assert set(run.gpu_state["workers"]) == {"worker0", "worker1"}
    plain = run_nightly(
        _opts(f"sqlite:///{tmp_path / 'p.db'}", tmp_path, suites=("perf", "ulp"), iterations=5)
    )
    assert plain.summary["results"] == outcome.summary["results"]


@pytest.mark.e2e
def test_build_failure_is_recorded_as_a_failed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGRESS_STACKS_DIR", str(tmp_path))
    assert main(["stack", "pin", "broken", "--backend", "cpu"]) == 0
    pin = tmp_path / "broken.toml"
    pin.write_text(pin.read_text().replace("extra_flags = []", 'extra_flags = ["-fno-such-flag-anywhere"]'))
    db = f"sqlite:///{tmp_path / 'r.db'}"
    outcome = run_nightly(_opts(db, tmp_path, stack="broken", allow_drift=True, cache_dir=tmp_path / "cache"))
    assert outcome.exit_code == 2
    assert "no-such-flag" in outcome.summary["error"]
    store = open_store(db)
    with store.reader() as s:
        run = s.scalars(select(Run)).one()
    assert run.status == "failed" and "build failed" in run.message


@pytest.mark.slow  # a live fingerprint probe and a pin written and read (~2-3 s)
def test_drift_refuses_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REGRESS_STACKS_DIR", str(tmp_path))
    assert main(["stack", "pin", "old", "--backend", "cpu"]) == 0
    pin = tmp_path / "old.toml"
    pin.write_text(pin.read_text().replace('torch = "', 'torch = "1.0-'))
    db = tmp_path / "r.db"
    assert main(["nightly", "--stack", "old", "--quick", "--db", f"sqlite:///{db}"]) == 2
    assert "torch" in capsys.readouterr().err
    assert not db.exists()


def _stored_results(path: Path) -> int:
    """Counts results without migrating: the nightly under test owns the schema."""
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM results").fetchone()[0])
    except sqlite3.OperationalError:  # schema not created yet
        return 0


def _count(db_url: str, model: type) -> int:
    store = open_store(db_url)
    try:
        with store.reader() as s:
            return int(s.scalar(select(func.count()).select_from(model)) or 0)
    finally:
        store.engine.dispose()


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_killed_run_is_left_incomplete_with_its_results_intact(tmp_path: Path, sig: signal.Signals) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "regress",
            "nightly",
            "--backend",
            "cpu",
            "--suites",
            "perf",
            "--quick",  # the first case starts within seconds and takes about a second
            "--db",
            db,
            "--out",
            str(tmp_path / "out"),
            # The Sq = 64 cases run last (units go longest first) and spin for ever under a 600 s
            # watchdog: the run is still going when it is killed, however fast or loaded the
            # machine, without making every case long.
            "--inject",
            "hang=64",
            "--case-timeout",
            "600",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "REGRESS_CPU_THREADS": "1"},
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if _stored_results(tmp_path / "r.db") >= 1:
                break
            if proc.poll() is not None:
                pytest.fail(f"the nightly exited ({proc.returncode}) before storing a result")
            time.sleep(0.2)
        else:
            pytest.fail("the nightly stored no result within 300 s")
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    stored = _count(db, Result)
    assert main(["runs", "list", "--json", "--db", db]) == 0  # reaps the dead run
    store = open_store(db)
    with store.reader() as s:
        run = s.scalars(select(Run)).one()
        results = s.scalars(select(Result)).all()
    # SIGKILL: no chance to end, reaped as incomplete. SIGTERM ends it like its deadline (issue 42,
    # tests/test_signals.py): the finished results kept, the rest recorded 'skip', 'cancelled'.
    assert run.status == ("incomplete" if sig == signal.SIGKILL else "cancelled")
    assert len(results) == stored >= 1
    ran = [r for r in results if r.status != "skip"]
    assert ran and all(r.samples for r in ran)  # no result of a case that ran without its samples
    if sig == signal.SIGTERM:
        assert all(r.message.startswith("cancelled by SIGTERM") for r in results if r.status == "skip")


@pytest.mark.e2e
def test_export_writes_one_line_per_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    outcome = run_nightly(_opts(db, tmp_path, suites=("ulp",)))
    capsys.readouterr()
    assert main(["export", "--db", db, "--format", "jsonl"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) == outcome.summary["results"]
    assert {
        "run_id",
        "stack_digest",
        "suite",
        "b",
        "h",
        "sq",
        "sk",
        "d",
        "layout",
        "mode",
        "status",
        "metrics",
    } <= set(lines[0])
    assert main(["export", "--db", db, "--format", "csv"]) == 0
    csv_lines = capsys.readouterr().out.strip().splitlines()
    assert len(csv_lines) == len(lines) + 1
    assert main(["runs", "show", outcome.run_id or "", "--db", db]) == 0


def test_a_gpu_backend_without_its_gpu_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the refusal path cannot be shown here")
    db = tmp_path / "r.db"
    assert main(["nightly", "--backend", "cuda", "--quick", "--db", f"sqlite:///{db}"]) == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().err
    assert not db.exists()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("notaurl", "not a database URL"),
        ("bogus://x", "cannot open database"),
        ("postgresql://nobody@127.0.0.1:1/x", "cannot connect"),
    ],
    ids=["no-scheme", "unknown-dialect", "unreachable"],
)
def test_bad_database_urls_are_one_clear_line(
    url: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "list", "--db", url]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def _the_one_drilled_case(db: str, status: str, results: int) -> tuple[Run, Result]:
    """The run and its one result with `status`: the drilled Sq = 64 case; every other case passed."""
    with open_store(db).reader() as s:
        run = s.scalars(select(Run)).one()
        rows = s.execute(select(Result, Case).join(Case, Case.id == Result.case_id)).all()
    by_status: dict[str, list[str]] = {}
    for res, case in rows:
        by_status.setdefault(res.status, []).append(case.name)
    assert by_status[status] == ["b1_h2_sq64_sk1_bshd_rtne_sk1"]
    assert len(by_status["pass"]) == results - 1  # every other case ran and passed
    return run, next(res for res, _ in rows if res.status == status)


@pytest.mark.e2e
def test_a_hung_case_is_recorded_as_timeout_and_the_run_goes_on(tmp_path: Path) -> None:
    """The watchdog's fire drill: launches with Sq = 64 spin forever (only the sk1 edge case has it)."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    outcome = run_nightly(
        _opts(db, tmp_path, suites=("ulp",), inject={"hang_sq": 64}, gpus="0,1", case_timeout=8.0)
    )
    assert outcome.exit_code == 1
    assert outcome.summary["timeouts"] == 1 and outcome.summary["failed"] == outcome.summary["errors"] == 0
    timing = outcome.summary["timing"]
    assert timing["timeouts"] == 1 and timing["replaced"] == 1
    run, hung = _the_one_drilled_case(db, "timeout", outcome.summary["results"])
    assert run.status == "failed"
    # The evidence: the step it was stuck in and the worker's Python stack at the kernel call.
    assert "last step: kernel" in hung.message
    assert "ulp.py" in hung.message and "forward" in hung.message
    assert hung.metrics["time_limit_s"] == 8.0


@pytest.mark.e2e
def test_a_worker_that_dies_mid_case_costs_that_case_only(tmp_path: Path) -> None:
    """The worker-loss drill: launches with Sq = 64 abort the process (SIGABRT), as a faulting kernel
    would. The case is recorded as an error naming the death, a replacement worker takes the rest of
    the dead worker's cases, and every other case passes."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    outcome = run_nightly(_opts(db, tmp_path, suites=("ulp",), inject={"crash_sq": 64}, gpus="0,1"))
    assert outcome.exit_code == 1
    assert outcome.summary["errors"] == 1 and outcome.summary["failed"] == outcome.summary["timeouts"] == 0
    timing = outcome.summary["timing"]
    assert timing["crashes"] == 1 and timing["replaced"] == 1
    _, lost = _the_one_drilled_case(db, "error", outcome.summary["results"])
    assert "died (exit code -6) during this case" in lost.message


def _quick_cpu_ulp_names(keep: Callable[[str], bool] = lambda name: True) -> set[str]:
    """The names of the cases the quick CPU ULP suite plans (the directed rounding cases included)."""
    from regress.run.suites import get_suite
    from regress.run.suites.base import SuiteContext

    specs = get_suite("ulp").cases(SuiteContext(library=None, device="cpu", quick=True))  # type: ignore[arg-type]
    return {spec.name for spec in specs if keep(spec.name)}


def _quick_cpu_ulp_cases() -> int:
    """How many cases the quick CPU ULP suite plans."""
    return len(_quick_cpu_ulp_names())


@pytest.mark.e2e  # a whole nightly in a subprocess, six 4 s watchdog timeouts
def test_a_run_with_many_hung_cases_finishes_with_every_case_accounted_for(tmp_path: Path) -> None:
    """The GPU drill that used to give up (issue 23: 'worker pool lost 21 of 26 cases; worker 0
    replaced 4 times; not again', a traceback, the cases that do not hang never run): on one
    worker, the six ULP cases with Sq = 113 hang, more than the four replacements the pool used to
    allow. Each is a timeout with its evidence, every other case passes, the bundle is written, the
    exit code is 1 and the output is a summary, not a traceback."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    out = tmp_path / "out"
    args = ["--backend", "cpu", "--quick", "--suites", "ulp", "--inject", "hang=113", "--case-timeout", "4"]
    proc = subprocess.run(
        [sys.executable, "-m", "regress", "nightly", *args, "--db", db, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "Traceback" not in output
    n = _quick_cpu_ulp_cases()
    assert f"{n} of {n} cases have a status" in proc.stdout
    sq113 = _quick_cpu_ulp_names(lambda name: "_sq113_" in name)  # dense and ABI v2 cases alike
    assert len(sq113) >= 6 and f"watchdog: {len(sq113)} timed out" in proc.stdout
    with open_store(db).reader() as s:
        run = s.scalars(select(Run)).one()
        rows = s.execute(select(Result, Case).join(Case, Case.id == Result.case_id)).all()
    assert run.status == "failed" and run.exit_code == 1
    status = {case.name: res.status for res, case in rows}
    assert len(status) == n
    hung = {name for name, st in status.items() if st == "timeout"}
    assert hung == {name for name in status if "_sq113_" in name} == sq113
    assert all(st == "pass" for name, st in status.items() if name not in hung)
    for res, _case in rows:
        if res.status == "timeout":
            assert "last step: kernel" in res.message and "forward" in res.message
    (bundle,) = (out / "bundles").glob("*.json")
    assert len(read_bundle(bundle)["results"]) == n


@pytest.mark.e2e
def test_a_device_that_does_not_answer_is_given_up_and_its_cases_skipped(tmp_path: Path) -> None:
    """A worker whose start-up blocks (its library is a FIFO nobody writes: dlopen waits forever, as
    a wedged device would) or fails (no library) is never ready: the pool gives the device up
    without a replacement and records every case 'skip' with the reason, instead of raising."""
    from regress.run.nightly import plan_cases
    from regress.run.runner import CaseOptions
    from regress.run.shard import WorkerPool

    plan = plan_cases(NightlyOptions(backend="cpu", quick=True, suites=("ulp",)), "cpu", "cpu")[:3]
    fifo = tmp_path / "libwedged.so"
    os.mkfifo(fifo)
    # The FIFO blocks for ever, so a short limit gives the same verdict; the missing library fails
    # within seconds, far inside its limit.
    for library, why, limit in (
        (fifo, "did not answer", 8.0),
        (tmp_path / "no.so", "could not start a worker", 300.0),
    ):
        pool = WorkerPool(
            "cpu", [], CaseOptions(quick=True), time_limit_floor_s=60, identify=False, ready_limit_s=limit
        )
        pool.start()
        try:
            pool.load(library)
            results = list(pool.run(plan, {}, None))
        finally:
            pool.close()
        assert sorted(r.case.key for r in results) == sorted(spec.key for _, spec in plan)
        assert all(r.status == "skip" and r.message.startswith("unhealthy: worker 0 " + why) for r in results)
        assert pool.stats.unhealthy["worker0"].startswith("worker 0 " + why)
        assert pool.stats.skipped == {"unhealthy": 3} and pool.stats.replaced == 0


@pytest.mark.e2e
def test_the_deadline_bounds_the_run(tmp_path: Path) -> None:
    """--deadline: a case in flight when it passes is stopped, the cases not started are skipped,
    each saying which; the run is stored and exits 1. The first unit hangs (Sq = 113 is the longest
    ULP unit, so it runs first) with a time limit far beyond the deadline, so no case can pass:
    whether the deadline falls during start-up or in the hung case, every case is a deadline skip."""
    db = f"sqlite:///{tmp_path / 'r.db'}"
    outcome = run_nightly(
        _opts(db, tmp_path, suites=("ulp",), inject={"hang_sq": 113}, case_timeout=600.0, deadline=15.0)
    )
    assert outcome.exit_code == 1 and outcome.bundle_path is not None and outcome.bundle_path.exists()
    timing = outcome.summary["timing"]
    n = _quick_cpu_ulp_cases()
    with open_store(db).reader() as s:
        run = s.scalars(select(Run)).one()
        results = [(r.status, r.message) for r in s.scalars(select(Result))]
    # the cases planned before the first Sq = 113 one (ABI v2's come first) finish; the rest do not run
    ran = sum(st == "pass" for st, _ in results)
    assert timing["deadline_reached"] and timing["not_run"] == {"deadline": n - ran}
    messages = [m for st, m in results if st != "pass"]
    assert run.status == "failed" and len(results) == n
    stopped = [m for m in messages if "into this case (last step:" in m]
    assert len(stopped) <= 1 and all(m.startswith("deadline: the run's deadline passed") for m in messages)
    assert sum("before this case started" in m for m in messages) == len(messages) - len(stopped)


def test_deadline_durations() -> None:
    from regress.facts.errors import UserError
    from regress.run.runner import parse_duration

    assert parse_duration("90m") == 5400 and parse_duration("1h30m") == 5400 and parse_duration("600") == 600
    assert parse_duration("45s") == 45 and parse_duration("1.5h") == 5400
    for bad in ("", "soon", "0", "1d", "-5m"):
        with pytest.raises(UserError, match="--deadline"):
            parse_duration(bad)


def test_units_keep_a_shared_reference_together_and_run_longest_first() -> None:
    from regress.run.nightly import plan_cases
    from regress.run.shard import make_units, predict_wall

    plan = plan_cases(NightlyOptions(backend="cpu", suites=("ulp", "perf")), "cpu", "cpu")
    units = make_units(plan, {})
    ulp_units = [u for u in units if u.items[0][0] == "ulp"]
    for unit in ulp_units:  # one fp64 reference per (shape, input): its cases share a worker
        shapes = {
            (s.params["b"], s.params["h"], s.params["sq"], s.params["sk"], s.params["input"])
            for _, s in unit.items
        }
        assert len(shapes) == 1
    assert sum(len(u.items) for u in units) == len(plan)
    assert [u.cost for u in units] == sorted((u.cost for u in units), reverse=True)
    measured = {spec.key: 1.0 for _, spec in plan}
    measured[plan[-1][1].key] = 50.0
    assert make_units(plan, measured)[0].items[0][1] == plan[-1][1]  # measured cost decides
    assert predict_wall([4, 3, 3, 2], 2) == 6 and predict_wall([4, 3, 3, 2], 1) == 12


def test_hang_drill_needs_a_query_length() -> None:
    from regress.facts.errors import UserError
    from regress.run.runner import parse_inject

    assert parse_inject(["hang=64"]) == {"hang_sq": 64}
    assert parse_inject(["crash=64"]) == {"crash_sq": 64}
    for bare in ("hang", "crash"):
        with pytest.raises(UserError, match="query length"):
            parse_inject([bare])


def test_rounding_swap_drill_names_two_modes() -> None:
    from regress.facts.errors import UserError
    from regress.native.build import BuildError, inject_flags
    from regress.run.runner import parse_inject

    assert parse_inject(["swap_rounding=rtne:rtz"]) == {"round_swap": 5}
    assert parse_inject(["swap_rounding=rtna:rtne"]) == {"round_swap": 3}
    assert inject_flags({"round_swap": 6}) == ["-DRA_INJECT_ROUND_SWAP=6"]
    for bad in ("swap_rounding", "swap_rounding=rtne", "swap_rounding=rtne:rtne", "swap_rounding=rtne:up"):
        with pytest.raises(UserError, match="two different modes"):
            parse_inject([bad])
    with pytest.raises(BuildError, match="two modes"):
        inject_flags({"round_swap": 4})


def test_phases_count_each_second_once() -> None:
    import time as _time

    from regress.facts.phases import PhaseRecorder, phase, phase_seconds, recording

    entered: list[str] = []
    rec = PhaseRecorder(on_enter=entered.append)
    started = _time.perf_counter()
    with recording(rec), phase("compare"):
        _time.sleep(0.02)
        with phase("kernel"):
            _time.sleep(0.05)
    outer = _time.perf_counter() - started
    split = phase_seconds(rec.metrics())
    assert split["kernel"] >= 0.05 and split["compare"] >= 0.02
    assert split["kernel"] + split["compare"] <= outer + 1e-3  # the inner time is not counted twice
    assert entered == ["compare", "kernel", "compare"]  # the watchdog sees the step it is back in
    with phase("ignored"):  # outside a recorder: nothing recorded, nothing raised
        pass
