"""The worker pool's scheduling, without processes (regress.run.shard.Schedule): units dealt longest
first, a lost worker's unfinished cases back at the front, a late result ignored, and every case of
the plan recorded exactly once whatever the losses."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from regress.facts.results import CaseSpec
from regress.run.shard import Schedule


def _plan(n: int) -> list[tuple[str, CaseSpec]]:
    """n determinism cases (one unit each) of growing cost, and two ULP cases sharing a reference."""
    plan = [
        ("determinism", CaseSpec("determinism", f"d{i}", {"b": 1, "h": 1, "sq": 64 * (i + 1), "sk": 64}))
        for i in range(n)
    ]
    ulp = {"b": 1, "h": 1, "sq": 32, "sk": 32, "d": 128, "input": "randn"}
    plan += [("ulp", CaseSpec("ulp", f"u{m}", {**ulp, "mode": m})) for m in ("rtne", "rtz")]
    return plan


def test_units_are_dealt_longest_first_and_a_lost_workers_rest_goes_first() -> None:
    books = Schedule(_plan(3), {})
    first = books.deal()
    assert first is not None and [s.name for _, s in first[1]] == ["d2"]  # the longest
    second = books.deal()
    assert second is not None and [s.name for _, s in second[1]] == ["d1"]
    uid, items = books.deal() or (0, [])
    assert [s.name for _, s in items] == ["d0"]
    ulp_uid, ulp_items = books.deal() or (0, [])
    assert [s.name for _, s in ulp_items] == ["urtne", "urtz"]  # one shared reference, one unit
    assert books.deal() is None
    assert books.close(ulp_uid, 0)
    books.requeue([uid, ulp_uid])  # lost: d0 not started, urtz not finished
    again = [books.deal(), books.deal()]
    assert [[s.name for _, s in u[1]] for u in again if u] == [["d0"], ["urtz"]]
    assert not books.close(ulp_uid, 1)  # the lost worker's late result: urtz is owed to the new unit
    assert again[1] is not None and books.close(again[1][0], 0)


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(st.tuples(st.sampled_from(["deal", "finish", "lose"]), st.integers(0, 3)), max_size=40)
)
def test_every_case_is_recorded_exactly_once_whatever_is_lost(events: list[tuple[str, int]]) -> None:
    plan = _plan(4)
    books = Schedule(plan, {})
    workers: dict[int, list[int]] = {w: [] for w in range(4)}  # worker -> units it holds, oldest first
    recorded: list[str] = []
    for event, w in events:
        held = workers[w]
        if event == "deal":
            dealt = books.deal()
            if dealt is not None:
                held.append(dealt[0])
        elif event == "finish" and held:  # the worker records the next open case of its oldest unit
            uid = held[0]
            index = next(i for i in range(len(books.table[uid])) if books.is_open(uid, i))
            assert books.close(uid, index)
            recorded.append(books.spec(uid, index).name)
            if books.unit_done(uid):
                held.pop(0)
        elif event == "lose":
            books.requeue(held)
            held.clear()
    recorded += [s.name for s in books.close_the_rest()]
    assert sorted(recorded) == sorted(s.name for _, s in plan)
    assert books.deal() is None
