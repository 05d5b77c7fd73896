"""The gfx942 launch planner (kernel/hip/parts/plan.h), asked through the ABI's ra_plan_launch in its
host-only build (regress.plan): the rules it states, hostile shapes, the CLI that prints it, and what
a result, `regress runs show` and the case page show of it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regress.facts.abi import KernelError
from regress.facts.metrics import plan_label
from regress.facts.results import CaseResult, CaseSpec
from regress.native.build import PLANNERS, REPO_ROOT, BuildError, build_planner
from regress.native.plan import plan_launch, summary
from regress.store.repo import Store, add_result, finish_run, get_or_create_stack, start_run

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="g++ builds the host-only planner")

RECORD_BYTES = 256 * 132 * 4  # one split part's fp32 rows (kBlockQ x kSplitRecord)


def _check(plan: dict, b: int, h: int, sq: int, sk: int, cus: int) -> None:
    """What every gfx942 plan must say, from the shape alone (no rule restated: only the sums)."""
    qblocks, tiles = -(-sq // 256), -(-sk // 64)
    wgs = qblocks * b * h
    # a q-block whose rows fit one wave (32) runs the decode kernels (parts/waves.h), else the dense ones
    waves = sq <= 32
    kinds = ("gfx942_waves", "gfx942_waves_split") if waves else ("gfx942_dense", "gfx942_tail_split")
    assert plan["kind"] in kinds and plan["threads"] == 512
    prefix = {
        "dense": "ra_attn_waves_gfx942_" if waves else "ra_attn_fwd_gfx942_",
        "merge": "ra_attn_merge_gfx942_",
    }
    prefix["split"] = "ra_attn_waves_split_gfx942_" if waves else "ra_attn_split_gfx942_"
    assert all(la["kernel"].startswith(prefix[la["role"]]) for la in plan["launches"])
    assert (plan["tiles"], plan["key_blocks"], plan["grid"][0]) == (wgs, tiles, qblocks)
    assert plan["shared_bytes"] == 65536 and plan["splits"] == 1 and plan["dynamic_scheduler"] == 0
    launches = plan["launches"]
    dense = [la for la in launches if la["role"] == "dense"]
    assert all(la["grid"][1] <= 65535 for la in dense)
    assert sum(la["grid"][1] for la in dense) == plan["grid"][1]
    if plan["kind"] == kinds[0]:
        assert plan["grid"][1] == b * h and plan["workspace_bytes"] == 0 and plan["merge"] == "none"
        assert [la["role"] for la in launches] == ["dense"] * len(dense)
        return
    tail, parts, per = plan["split_tiles"], plan["tail_splits"], plan["blocks_per_split"]
    assert 0 < tail < cus and tail == wgs % cus and tiles >= 8  # the last partial round only
    assert parts >= 2 and (parts - 1) * per < tiles <= parts * per  # no empty part, every key once
    assert plan["workspace_bytes"] == tail * parts * RECORD_BYTES and plan["merge"] == "launch"
    assert plan["grid"][1] * qblocks >= wgs - tail > (plan["grid"][1] - 1) * qblocks  # dense stops there
    assert [la["role"] for la in launches[len(dense) :]] == ["split", "merge"]
    assert launches[-2]["grid"] == [parts, tail, 1] and launches[-1]["grid"] == [16, tail, 1]


@settings(max_examples=150, deadline=None)
@given(
    b=st.integers(1, 64),
    h=st.integers(1, 128),
    sq=st.integers(1, 40000),
    sk=st.integers(1, 200000),
    cus=st.sampled_from([1, 2, 7, 80, 304]),
    layout=st.sampled_from(["bshd", "bhsd"]),
)
def test_every_plan_covers_the_call_once(b: int, h: int, sq: int, sk: int, cus: int, layout: str) -> None:
    plan = plan_launch("hip", b, h, sq, sk, compute_units=cus, layout=layout)
    _check(plan, b, h, sq, sk, cus)
    lay = "packed" if layout == "bhsd" else "strided"
    if h == 1:  # BSHD with one head is BHSD: seq stride 128
        lay = "packed"
    assert {la["kernel"].rsplit("_", 1)[1] for la in plan["launches"]} == {lay}


def test_known_plans() -> None:
    """The shapes the docs and the timing model quote: 32 q-blocks on 304 CUs all split (no dense
    round), 1216 (four whole rounds) dense; a one-CU device never splits; fewer than 8 key tiles never."""
    small = plan_launch("hip", 1, 4, 2048, 2048)
    assert small["kind"] == "gfx942_tail_split" and small["grid"][1] == 0 and small["split_tiles"] == 32
    assert [la["role"] for la in small["launches"]] == ["split", "merge"]
    assert plan_launch("hip", 4, 38, 2048, 2048)["kind"] == "gfx942_dense"
    assert plan_launch("hip", 1, 3, 40, 777, compute_units=1)["kind"] == "gfx942_dense"
    assert plan_launch("hip", 1, 3, 40, 7 * 64, compute_units=304)["kind"] == "gfx942_dense"
    many = plan_launch("hip", 1, 70000, 1, 64)  # more (batch, head) rows than one grid y holds
    assert [la["grid"][1] for la in many["launches"]] == [65535, 70000 - 65535]


def test_a_workspace_cap_is_kept() -> None:
    free = plan_launch("hip", 1, 4, 2048, 2048)
    for cap in (free["workspace_bytes"] - 1, 40 * RECORD_BYTES, RECORD_BYTES):
        capped = plan_launch("hip", 1, 4, 2048, 2048, max_workspace_bytes=cap)
        assert capped["workspace_bytes"] <= cap
        _check(capped, 1, 4, 2048, 2048, 304)


@pytest.mark.parametrize(
    ("shape", "cus", "says", "code"),
    [
        ((1, 4, 0, 8), 304, "every size must be >= 1", 3),
        ((0, 4, 8, 8), 304, "every size must be >= 1", 3),
        ((1 << 20, 1 << 12, 8, 8), 304, "must be < 2^31", 3),
        ((1, 1, (1 << 31) - 1, 8), 304, "2^32 work-items", 3),
        ((1 << 15, 1 << 15, 1024, 8), 304, "2^32 - 1 or more", 3),
        ((1, 1, 8, 8), 0, "compute_units is 0", 7),
        ((1, 1, 8, 8), -5, "compute_units is -5", 7),
    ],
)
def test_hostile_shapes_are_one_clear_error(shape: tuple[int, ...], cus: int, says: str, code: int) -> None:
    with pytest.raises(KernelError) as e:
        plan_launch("hip", *shape, compute_units=cus)
    assert says in str(e.value) and "\n" not in str(e.value) and e.value.code == code


def test_the_planner_table_and_a_missing_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One build path per backend's planner; a backend whose planner source is not in the tree says
    so in one line, naming the file."""
    assert set(PLANNERS) == {"hip", "cuda"}
    assert build_planner("hip", cache_dir=tmp_path).path.is_file()
    assert build_planner("cuda", cache_dir=tmp_path).path.is_file()
    gone = dataclasses.replace(PLANNERS["cuda"], source="kernel/cuda/no_such_plan_host.cpp")
    monkeypatch.setitem(PLANNERS, "cuda", gone)
    with pytest.raises(BuildError, match=r"kernel/cuda/no_such_plan_host\.cpp is missing"):
        build_planner("cuda", cache_dir=tmp_path)
    with pytest.raises(BuildError, match="no launch planner for backend 'cpu'"):
        build_planner("cpu", cache_dir=tmp_path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "regress", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env={**os.environ, "COLUMNS": "250"},  # rich wraps a table to the terminal's width
    )


def test_regress_plan_prints_the_plan(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run through the console entry point (a process of its own); the other answers in process
    (regress.cli.main: the same command, exit code and one-line errors, without 4 more interpreters)."""
    from regress.cli import main

    text = _cli("plan", "1", "4", "2048", "2048", "--backend", "hip")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("gfx942_tail_split  (hip, 304 compute units)")
    assert "launch merge ra_attn_merge_gfx942_rtne_strided  grid [16, 32, 1]" in text.stdout
    monkeypatch.setenv("COLUMNS", "250")

    def cli(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, err = cli(
        "plan", "4", "38", "2048", "2048", "--backend", "hip", "--json", "--compute-units", "80"
    )
    assert code == 0, err
    assert json.loads(out) == plan_launch("hip", 4, 38, 2048, 2048, compute_units=80)
    code, out, err = cli("plan", "1", "1", "8", "8", "--backend", "hip", "--compute-units", "0")
    assert code == 2 and "--compute-units" in err
    code, out, err = cli("plan", "32768", "32768", "1024", "8", "--backend", "hip")
    assert code == 2 and err.count("\n") == 1 and "2^32 - 1 or more" in err
    # The sm_90a planner answers the same command (kernel/cuda/plan_host.cpp, no GPU needed).
    code, out, err = cli("plan", "2", "8", "1", "32768", "--backend", "cuda", "--json")
    assert code == 0, err
    assert json.loads(out) == plan_launch("cuda", 2, 8, 1, 32768)
    assert json.loads(out)["kind"].startswith("sm90_") and json.loads(out)["splits"] > 1
    # ABI v2's axes (issue 40): a causal GQA prefill and a varlen batch plan the v2 kernels
    code, out, err = cli(
        "plan", "2", "32", "8192", "8192", "--backend", "cuda", "--heads-kv", "8", "--mask", "causal_top_left"
    )
    assert code == 0 and out.startswith("sm90_v2_causal  (cuda, 132"), err
    code, out, err = cli(
        "plan", "64", "32", "26000", "26000", "--backend", "cuda", "--heads-kv", "8", "--mask",
        "causal_bottom_right", "--varlen", "8000,8000", "--lse", "--json",
    )  # fmt: skip
    assert code == 0, err
    want = plan_launch(
        "cuda",
        64,
        32,
        26000,
        26000,
        heads_kv=8,
        mask="causal_bottom_right",
        max_seqlen=(8000, 8000),
        lse=True,
    )
    assert json.loads(out) == want and want["kind"] == "sm90_v2_varlen_packgqa_causal"
    code, out, err = cli("plan", "2", "8", "64", "64", "--backend", "cuda", "--varlen", "64")
    assert code == 2 and "MAXQ,MAXK" in err
    code, out, err = cli(
        "plan", "2", "8", "64", "64", "--backend", "hip", "--mask", "causal_top_left", "--json"
    )
    assert code == 0 and json.loads(out)["kind"] == "gfx942_v2", err


def test_plan_label_reads_what_a_result_recorded() -> None:
    split = summary(plan_launch("hip", 1, 4, 2048, 2048))
    assert split == {"plan_kind": "gfx942_tail_split", "plan_splits": 1, "plan_tail_splits": 8}
    assert plan_label(split) == "gfx942_tail_split, 8 tail parts"
    assert plan_label(summary(plan_launch("hip", 4, 38, 2048, 2048))) == "gfx942_dense"
    for stored in ({}, None, [1], {"plan_kind": 3}, {"p50_ms": 1.0}):
        assert plan_label(stored) == ""
    assert plan_label({"plan_kind": "k", "plan_tail_splits": True}) == "k"  # a bool is no count


def test_runs_show_and_the_case_page_show_the_plan(store: Store, db_url: str, tmp_path: Path) -> None:
    from regress.present.site import build_site

    with store.transaction() as session:
        stack_id = get_or_create_stack(session, digest="f" * 64, keys={}, schema_version=1, name="s").id
    spec = CaseSpec(
        "perf",
        "b1_h4_sq2048_sk2048_bshd_rtne",
        {"b": 1, "h": 4, "sq": 2048, "sk": 2048, "d": 128, "layout": "bshd", "mode": "rtne"},
    )
    plan = summary(plan_launch("hip", 1, 4, 2048, 2048))
    for _ in range(2):
        rid = start_run(store, stack_id=stack_id, build_id=None, backend="hip", suites=["perf"])
        times = [1.0 + 0.01 * k for k in range(30)]
        add_result(store, rid, CaseResult(spec, "pass", {"p50_ms": 1.1, **plan}, {"time_ms": times}))
        finish_run(store, rid, status="complete", exit_code=0)
    shown = _cli("runs", "show", rid, "--db", db_url)
    assert shown.returncode == 0, shown.stderr
    assert "plan" in shown.stdout and "gfx942_tail_split, 8 tail parts" in shown.stdout
    out = tmp_path / "site"
    build_site(store, out)
    page = (out / "case").glob("*.html")
    html = "".join(p.read_text() for p in page)
    assert "<th>launch plan</th>" in html and "<code>gfx942_tail_split, 8 tail parts</code>" in html


@pytest.mark.skipif(not shutil.which("clang-19"), reason="clang-19 builds the gfx942 code object")
def test_a_result_records_the_plan_its_library_runs() -> None:
    """What perf and e2e store next to a timing (suites.common.plan_metrics): the plan of the library
    under test, asked of that library; nothing for the CPU golden model, which has no planner."""
    from regress.facts.cases import Shape
    from regress.native.build import build_kernel
    from regress.run.runner import CaseOptions, make_context
    from regress.run.suites.common import plan_metrics

    opts = CaseOptions(quick=True, seed=1, iterations=None)
    emu = make_context(build_kernel("hip-emu").path, "cpu", opts)
    for shape in (Shape(1, 4, 2048, 2048), Shape(4, 38, 2048, 2048)):
        want = summary(plan_launch("hip", shape.b, shape.h, shape.sq, shape.sk))
        assert plan_metrics(emu, shape, "bshd", "rtne") == want
    cpu = make_context(build_kernel("cpu").path, "cpu", opts)
    assert plan_metrics(cpu, Shape(1, 4, 2048, 2048), "bshd", "rtne") == {}


def test_v2_calls_plan_the_v2_kernels() -> None:
    """ABI v2 (issue 40): any of GQA, a mask, varlen or an LSE launches the v2 kernels. A causal or
    varlen call is one launch, grid (ceil(longest q / 256), B*H), no tail split; an unmasked
    fixed-length one (GQA prefill, an LSE) takes the dense call's tail split on the v2 kernels
    (gfx942_v2_split); the same shape without them keeps its dense plan; a varlen call with no query
    rows launches nothing; lengths of 2^30 or more are refused."""
    dense = plan_launch("hip", 1, 4, 2048, 2048)
    assert dense["kind"] == "gfx942_tail_split"
    for kw in (
        dict(mask="causal_top_left"),
        dict(mask="causal_bottom_right"),
        dict(max_seqlen=(700, 2048)),
        dict(max_seqlen=(2048, 2048)),
        dict(heads_kv=2, lse=True, mask="causal_bottom_right"),
    ):
        plan = plan_launch("hip", 1, 4, 2048, 2048, **kw)  # type: ignore[arg-type]
        qblocks = -(-kw.get("max_seqlen", (2048,))[0] // 256)  # type: ignore[index, operator]
        assert plan["kind"] == "gfx942_v2" and plan["workspace_bytes"] == 0 and plan["merge"] == "none", kw
        (la,) = plan["launches"]
        assert la == {"role": "dense", "kernel": "ra_attn_v2_gfx942_rtne_strided", "grid": [qblocks, 4, 1]}, (
            kw
        )
    for kw in (dict(heads_kv=2), dict(lse=True), dict(heads_kv=1, lse=True)):
        plan = plan_launch("hip", 1, 4, 2048, 2048, **kw)  # type: ignore[arg-type]
        assert plan["kind"] == "gfx942_v2_split", kw
        assert [la["kernel"] for la in plan["launches"]] == [
            "ra_attn_v2_split_gfx942_strided",
            "ra_attn_v2_merge_gfx942_rtne_strided",
        ]
    empty = plan_launch("hip", 3, 4, 5, 10, max_seqlen=(0, 10))
    assert empty["grid"][0] == 0 and "launches" not in empty  # regress.plan lists none
    with pytest.raises(KernelError, match="below 2\\^30"):
        plan_launch("hip", 1, 1, 1 << 30, 64, mask="causal_top_left")


SPLIT_FIELDS = ("tiles", "key_blocks", "split_tiles", "tail_splits", "blocks_per_split", "workspace_bytes")


@settings(max_examples=150, deadline=None)
@given(
    b=st.integers(1, 64),
    hkv=st.integers(1, 16),
    group=st.sampled_from([1, 2, 4, 8]),
    sq=st.integers(2, 40000),
    sk=st.integers(1, 200000),
    cus=st.sampled_from([1, 2, 7, 80, 304]),
    layout=st.sampled_from(["bshd", "bhsd"]),
    lse=st.booleans(),
)
def test_an_unmasked_fixed_length_v2_call_takes_the_dense_calls_tail_split(
    b: int, hkv: int, group: int, sq: int, sk: int, cus: int, layout: str, lse: bool
) -> None:
    """Property: an unmasked fixed-length v2 call (GQA prefill, an LSE; Sq >= 2, so no decode view)
    splits exactly as the dense call of its shape does (the same tail, parts, key tiles a part and
    workspace); its v2 launch is one row of the first T - tail workgroups (the split and merge
    launches number their blocks past them, as the v2 grid does), and the v2 split and merge kernels
    of its layout and mode run the tail. The same call with a causal mask never splits."""
    h = hkv * group
    if h == hkv and not lse:
        lse = True  # a v2 call: GQA or an LSE
    kw = dict(compute_units=cus, layout=layout, heads_kv=hkv, lse=lse)
    plan = plan_launch("hip", b, h, sq, sk, **kw)  # type: ignore[arg-type]
    dense = plan_launch("hip", b, h, sq, sk, compute_units=cus, layout=layout)
    if "runs_as" in plan:  # BSHD MQA: the dense view (test_a_gqa_call_the_view_takes_plans_as_its_dense_call)
        assert hkv == 1 and layout == "bshd" and not lse
        return
    assert {k: plan[k] for k in SPLIT_FIELDS} == {k: dense[k] for k in SPLIT_FIELDS}
    lay = dense["launches"][0]["kernel"].rsplit("_", 1)[1]
    if not dense["split_tiles"]:  # the dense call is whole (gfx942_dense, or a decode's gfx942_waves)
        assert plan["kind"] == "gfx942_v2"
        return
    wgs, tail, parts = plan["tiles"], plan["split_tiles"], plan["tail_splits"]
    assert plan["kind"] == "gfx942_v2_split" and plan["merge"] == "launch"
    want = [("dense", f"ra_attn_v2_gfx942_rtne_{lay}", [wgs - tail, 1, 1])] if wgs > tail else []
    want += [
        ("split", f"ra_attn_v2_split_gfx942_{lay}", [parts, tail, 1]),
        ("merge", f"ra_attn_v2_merge_gfx942_rtne_{lay}", [16, tail, 1]),
    ]
    assert [(la["role"], la["kernel"], la["grid"]) for la in plan["launches"]] == want
    causal = plan_launch("hip", b, h, sq, sk, mask="causal_bottom_right", **kw)  # type: ignore[arg-type]
    assert causal["kind"] == "gfx942_v2" and causal["split_tiles"] == 0


def test_gqa_decode_runs_as_the_dense_kernels_over_each_kv_heads_rows() -> None:
    """A GQA decode (kernel/common/gqa_rows.h) plans the dense kernels over the view: heads_kv heads of
    `group` query rows, each key tile read once for the group, and the tail split the v2 kernels lack;
    BSHD MQA of any length too. An LSE, varlen, a top-left mask (row 0 sees key 0 only) or GQA rows
    that are no dense head's (BSHD with several K/V heads, Sq > 1; BHSD MQA) keep the v2 kernel."""
    for layout, lay in (("bshd", "strided"), ("bhsd", "packed")):
        plan = plan_launch("hip", 1, 32, 1, 8192, heads_kv=8, layout=layout)
        assert plan["kind"] == "gfx942_gqa_rows_waves_split" and plan["tiles"] == 8, plan
        assert [la["kernel"] for la in plan["launches"]] == [
            f"ra_attn_waves_split_gfx942_{lay}",
            f"ra_attn_merge_gfx942_rtne_{lay}",
        ]
        assert plan["tail_splits"] * plan["blocks_per_split"] >= 128
    rows = plan_launch("hip", 1, 32, 1, 300, heads_kv=8, mask="causal_bottom_right")
    assert rows["kind"] == "gfx942_gqa_rows_waves" and rows["tiles"] == 8 and rows["grid"] == [1, 8, 1]
    assert rows["runs_as"] == {"batch": 1, "heads": 8, "seqlen_q": 4, "seqlen_k": 300}
    assert "runs_as" not in plan_launch("hip", 1, 32, 1, 300, heads_kv=8, lse=True)
    assert rows["launches"] == [
        {"role": "dense", "kernel": "ra_attn_waves_gfx942_rtne_strided", "grid": [1, 8, 1]}
    ]
    mqa = plan_launch("hip", 2, 8, 40, 3000, heads_kv=1)  # 320 rows of one head: 2 q-blocks a sequence
    assert mqa["kind"].startswith("gfx942_gqa_rows") and mqa["tiles"] == 4
    # the v2 kernels: split where the call is unmasked and fixed-length (gfx942_v2_split), else one launch
    for kw in (dict(heads_kv=8, mask="causal_top_left"), dict(heads_kv=8, max_seqlen=(1, 8192))):
        assert plan_launch("hip", 1, 32, 1, 8192, **kw)["kind"] == "gfx942_v2", kw  # type: ignore[arg-type]
    assert plan_launch("hip", 1, 32, 1, 8192, heads_kv=8, lse=True)["kind"] == "gfx942_v2_split"
    assert plan_launch("hip", 1, 32, 2, 8192, heads_kv=8)["kind"] == "gfx942_v2_split"
    assert plan_launch("hip", 2, 8, 40, 3000, heads_kv=1, layout="bhsd")["kind"] == "gfx942_v2_split"


def test_a_q_block_that_fits_one_wave_runs_the_decode_kernels() -> None:
    """Issue 40's decode kernels (parts/waves.h) take every dense call whose q-block rows fit one wave,
    seqlen_q <= 32, a GQA view's too (gfx942_waves / gfx942_gqa_rows_waves and their splits, the
    split parts on ra_attn_waves_split and the one merge); 33 rows, ABI v2 calls (an LSE, a top-left
    mask, varlen) and a view of more than 32 rows do not."""
    for sq in (1, 4, 17, 32):
        plan = plan_launch("hip", 2, 8, sq, 300)
        assert plan["kind"] == "gfx942_waves", sq
        assert plan["launches"] == [
            {"role": "dense", "kernel": "ra_attn_waves_gfx942_rtne_strided", "grid": [1, 16, 1]}
        ]
    assert plan_launch("hip", 2, 8, 33, 300)["kind"] == "gfx942_dense"
    split = plan_launch("hip", 1, 4, 1, 2048, layout="bhsd", rounding="rtz")
    assert split["kind"] == "gfx942_waves_split"
    assert [la["kernel"] for la in split["launches"]] == [
        "ra_attn_waves_split_gfx942_packed",
        "ra_attn_merge_gfx942_rtz_packed",
    ]
    gqa = plan_launch("hip", 16, 32, 1, 8192, heads_kv=8)
    assert gqa["kind"] == "gfx942_gqa_rows_waves_split" and gqa["runs_as"]["seqlen_q"] == 4
    assert (
        plan_launch("hip", 2, 8, 4, 300, heads_kv=1)["kind"] == "gfx942_gqa_rows_waves"
    )  # BSHD MQA: 32 rows
    assert plan_launch("hip", 2, 33, 1, 300, heads_kv=1)["kind"] == "gfx942_gqa_rows"  # 33 rows
    assert plan_launch("hip", 2, 8, 5, 300, heads_kv=1)["kind"] == "gfx942_gqa_rows"  # 40 rows
    for kw in (dict(lse=True), dict(mask="causal_top_left"), dict(max_seqlen=(1, 300))):
        assert plan_launch("hip", 2, 8, 1, 300, **kw)["kind"] == "gfx942_v2", kw  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(
    b=st.integers(1, 64),
    hkv=st.integers(1, 16),
    group=st.sampled_from([2, 3, 4, 8, 16]),
    sq=st.integers(1, 3000),
    sk=st.integers(1, 100000),
    cus=st.sampled_from([1, 7, 80, 304]),
    layout=st.sampled_from(["bshd", "bhsd"]),
    mask=st.sampled_from(["none", "causal_bottom_right", "causal_top_left"]),
)
def test_a_gqa_call_the_view_takes_plans_as_its_dense_call(
    b: int, hkv: int, group: int, sq: int, sk: int, cus: int, layout: str, mask: str
) -> None:
    """Property: where the view applies (a decode unmasked or bottom-right, BSHD MQA unmasked), the
    GQA call's plan is the dense plan of heads_kv heads of group x Sq rows, launch for launch, and
    passes every dense plan's checks; elsewhere it is one v2 launch."""
    h = hkv * group
    plan = plan_launch("hip", b, h, sq, sk, compute_units=cus, layout=layout, heads_kv=hkv, mask=mask)
    decode = sq == 1 and mask != "causal_top_left"
    mqa = hkv == 1 and layout == "bshd" and mask == "none"
    if not (decode or mqa):  # the v2 kernels, split where unmasked (the test above)
        assert plan["kind"] in ("gfx942_v2", "gfx942_v2_split") and "runs_as" not in plan
        assert mask == "none" or plan["kind"] == "gfx942_v2"
        return
    dense = plan_launch("hip", b, hkv, sq * group, sk, compute_units=cus, layout="bhsd" if decode else layout)
    assert plan["runs_as"] == {"batch": b, "heads": hkv, "seqlen_q": sq * group, "seqlen_k": sk}
    assert plan["kind"] == dense["kind"].replace("gfx942_dense", "gfx942_gqa_rows").replace(
        "gfx942_tail_split", "gfx942_gqa_rows_split"
    ).replace("gfx942_waves", "gfx942_gqa_rows_waves")
    same = (
        "grid",
        "tiles",
        "key_blocks",
        "split_tiles",
        "tail_splits",
        "blocks_per_split",
        "workspace_bytes",
    )
    assert {k: plan[k] for k in same} == {k: dense[k] for k in same}
    assert [(la["role"], la["grid"]) for la in plan["launches"]] == [
        (la["role"], la["grid"]) for la in dense["launches"]
    ]
    _check({**plan, "kind": dense["kind"]}, b, hkv, sq * group, sk, cus)
