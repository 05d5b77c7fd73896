"""What the index derives from the runs: a stack's latest run and which stack replaced which
(regress/present/site/model.py), on small stores written through the store's own API."""

from __future__ import annotations

from pathlib import Path

from regress.facts.results import CaseResult, CaseSpec
from regress.present.site import build_site
from regress.present.site import data as site_data
from regress.present.site import model as site_model
from regress.store.repo import Store, add_result, finish_run, get_or_create_stack, open_store, start_run

SPEC = CaseSpec(
    suite="ulp",
    name="b1_h2_sq64_sk64_bshd_rtne",
    params={"b": 1, "h": 2, "sq": 64, "sk": 64, "d": 128, "layout": "bshd", "mode": "rtne"},
)


def _stack(store: Store, name: str, digest: str) -> int:
    with store.transaction() as s:
        return get_or_create_stack(s, digest=digest * 8, keys={}, schema_version=1, name=name).id


def _run(store: Store, stack_id: int, runner: str, *, drill: bool = False) -> str:
    rid = start_run(
        store,
        stack_id=stack_id,
        build_id=None,
        backend="cpu",
        suites=["ulp"],
        trigger="drill" if drill else "nightly",
        is_drill=drill,
        runner=runner,
        host={"hostname": "vm"},  # every host of this test shares a hostname, as the lent VMs do
    )
    add_result(store, rid, CaseResult(case=SPEC, status="timeout" if drill else "pass", metrics={"ulp": 0}))
    finish_run(store, rid, status="failed" if drill else "complete", summary={}, exit_code=int(drill))
    return rid


def _model(store: Store) -> site_model.Model:
    return site_model.build(site_data.load(store.engine, None), {})


def test_a_drill_is_never_a_stacks_latest_run(tmp_path: Path) -> None:
    """Issue 23: a hang drill run last showed as the stack's latest run on the index, its timeouts
    looking like the night's results."""
    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    stack = _stack(store, "cpu-local", "a")
    clean = _run(store, stack, "ci")
    drill = _run(store, stack, "ci", drill=True)
    assert _model(store).latest_run[stack].id == clean
    build_site(store, tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    latest = index[index.index("Latest run per stack") :]
    assert f"run/{clean}.html" in latest and f"run/{drill}.html" not in latest
    stacks = (tmp_path / "site" / "stacks.html").read_text()
    assert "–" not in stacks.split("<tbody>")[1]  # the stacks page still spans every run, drills too


def test_replaced_by_follows_one_pin_on_one_runner(tmp_path: Path) -> None:
    """Two pins on one runner (the CPU and the emulator stack of a CI host) take turns: neither
    replaces the other. One pin whose digest changed on its runner (a driver update, re-pinned)
    is replaced by its new digest, unless another runner still runs the old one."""
    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    cpu = _stack(store, "cpu-local", "a")
    emu = _stack(store, "gfx942-emu", "b")
    h200_old = _stack(store, "h200-cuda13.0", "c")
    h200_new = _stack(store, "h200-cuda13.0", "d")
    mi300 = _stack(store, "mi300x-rocm6.4", "e")
    for _night in range(2):
        _run(store, cpu, "ci")
        _run(store, emu, "ci")
    _run(store, h200_old, "h200-01")
    _run(store, mi300, "h200-01")  # an A/B arm on the same host: another pin, not a successor
    _run(store, h200_new, "h200-01")
    _run(store, h200_new, "h200-01", drill=True)
    model = _model(store)
    assert model.successor == {h200_old: h200_new}
    assert [(tr.old, tr.new, tr.where) for tr in model.transitions] == [(h200_old, h200_new, "h200-01")]
    assert {s.id for s in model.current_stacks} == {cpu, emu, h200_new, mi300}
    build_site(store, tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert index.count("replaced by") == 1

    _run(store, h200_old, "h200-02")  # a second host still on the old digest
    model = _model(store)
    assert model.successor == {} and h200_old in {s.id for s in model.current_stacks}
