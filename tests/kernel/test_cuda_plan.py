"""The sm_90a launch planner (kernel/cuda/plan.h), built host-only by g++ from kernel/cuda/plan_host.cpp
and called through ra_plan_launch, the entry point the CUDA library exports too: a table of shapes
that take each kernel, the invariants every plan keeps, and hypothesis over shapes and flags.
No GPU and no nvcc."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "h200"))
import cuda_plan as cp

from regress.native.plan import shape_params

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build the host planner")

SMS = cp.H200_SMS
MAX_WS = 512 << 20
SMEM_LIMIT = 227 * 1024

# (B, H, Sq, Sk) -> the kernel the default build plans, on the H200's 132 SMs
TABLE = [
    ((1, 32, 1, 8192), "sm90_merge_in_kernel"),  # decode: split over keys, merged by the last part
    ((8, 32, 1, 4096), "sm90_main"),  # 256 tiles of 32 blocks: no split pays (docs/perf-notes.md v5)
    ((4, 8, 64, 8192), "sm90_main"),  # split, merged by attn_merge_splits (64 rows: not in-kernel)
    ((256, 32, 128, 128), "sm90_dynamic"),  # one key block, one query block a head
    ((2, 40, 1024, 77), "sm90_short"),  # 77 keys: one block of 80
    ((2, 24, 4096, 256), "sm90_main_next_qk"),  # 2 key blocks, 32 query blocks a head
    ((1, 200, 100, 2000), "sm90_tail_split"),  # 200 tiles: the last 68 in 3 parts
    ((1, 32, 16384, 16384), "sm90_tail_split"),
    ((4, 16, 4096, 4097), "sm90_long"),  # 26 blocks of 160 pad less than 33 of 128
    ((2, 33, 512, 4096), "sm90_main"),  # 264 tiles = 2 whole rounds: no tail
]


def invariants(d: dict, b: int, h: int, sq: int, sk: int, max_ws: int = MAX_WS, sms: int = SMS) -> None:
    kind = d["kind"]
    assert kind.startswith("sm90_") or kind == "sm80_mma_sync", kind
    assert d["tiles"] == b * h * -(-sq // d["block_q"])
    assert d["key_blocks"] == -(-sk // d["block_k"])
    assert 0 < d["shared_bytes"] <= SMEM_LIMIT
    assert 0 <= d["workspace_bytes"] <= max_ws
    assert d["grid"][1] <= 65535 and d["grid"][2] == 1
    assert d["splits"] >= 1 and d["blocks_per_split"] >= 1
    if kind == "sm80_mma_sync":
        assert d["threads"] == 128 and d["splits"] == 1 and d["workspace_bytes"] == 0
        assert d["grid"][0] == -(-sq // 64) and d["grid"][1] % h == 0
        return
    assert d["threads"] == 384 and (d["grid"][1], d["grid"][2]) == (1, 1)
    assert 1 <= d["grid"][0] <= sms
    if d["splits"] > 1:  # no part empty: splits of blocks_per_split cover the blocks, one fewer would not
        s, sb = d["splits"], d["blocks_per_split"]
        assert (s - 1) * sb < d["key_blocks"] <= s * sb
        assert d["merge"] in (1, 2) and d["tail_splits"] == 0
        assert kind in ("sm90_main", "sm90_main_next_qk", "sm90_merge_in_kernel")
        assert d["grid"][0] <= d["tiles"] * s
    if kind == "sm90_tail_split":
        t, s, sb = d["split_tiles"], d["tail_splits"], d["blocks_per_split"]
        assert d["splits"] == 1 and 0 < t < sms and s > 1 and d["merge"] == 1
        assert (s - 1) * sb < d["key_blocks"] <= s * sb
        assert (d["tiles"] - t) % sms == 0 and d["tiles"] - t >= sms  # tail_first: whole rounds
        assert d["grid"][0] == sms
    else:
        assert d["split_tiles"] == 0 and d["tail_splits"] == 0
    if kind == "sm90_dynamic":
        assert d["dynamic_scheduler"] == 1 and d["workspace_bytes"] == 8 and d["splits"] == 1
    else:
        assert d["dynamic_scheduler"] == 0
    if kind == "sm90_short":
        assert sk <= d["block_k"] == 80 and d["key_blocks"] == 1
    if kind == "sm90_long":
        assert d["block_k"] == 160 and sq > 64 and d["splits"] == 1
    if d["splits"] == 1 and kind not in ("sm90_tail_split", "sm90_dynamic"):
        assert d["workspace_bytes"] == 0 and d["merge"] == 0
        waves = -(-d["tiles"] // sms)
        assert d["grid"][0] == -(-d["tiles"] // waves)  # the balanced grid: every CTA the same waves


@pytest.mark.parametrize(("shape", "kind"), TABLE, ids=[f"{s}" for s, _ in TABLE])
def test_the_table_of_shapes_takes_each_kernel(shape: tuple[int, int, int, int], kind: str) -> None:
    d = cp.plan(*shape)
    assert d["kind"] == kind, d
    invariants(d, *shape)


def test_the_plans_figures() -> None:
    d = cp.plan(1, 200, 100, 2000)
    assert (d["split_tiles"], d["tail_splits"], d["blocks_per_split"]) == (68, 3, 6)
    assert d["workspace_bytes"] == (68 * 3 * 128 * 130 + 68 * 2) * 4
    d = cp.plan(1, 32, 1, 8192)  # 32 tiles of 64 blocks: 4 splits of 16 (cost 20 of 65), merged in the kernel
    assert (d["splits"], d["blocks_per_split"], d["merge"], d["grid"][0]) == (4, 16, 1, 128)
    assert d["workspace_bytes"] == (4 * 32 * 1 * 130 + 32 * 2) * 4
    d = cp.plan(256, 32, 128, 128)
    assert d["grid"][0] == SMS  # the dynamic scheduler keeps one CTA per SM (no balance)
    assert cp.plan(1, 1, 1, 1)["kind"] == "sm90_dynamic"  # one block, one query block: before short keys


def test_a_workspace_limit_refuses_the_splits_not_the_launch() -> None:
    p = cp.params(1, 32, 1, 8192)
    assert cp.plan_of(p)["splits"] == 4
    small = cp.plan_of(p, max_workspace=1024)
    assert small["splits"] == 1 and small["workspace_bytes"] == 0 and small["kind"] == "sm90_main"
    tail = cp.params(1, 200, 100, 2000)
    assert cp.plan_of(tail, max_workspace=1 << 20)["kind"] == "sm90_main"
    dyn = cp.params(256, 32, 128, 128)
    assert cp.plan_of(dyn, max_workspace=4)["kind"] == "sm90_main_next_qk"  # two counters do not fit


def test_a_huge_split_falls_back_to_unsplit_under_the_default_limit() -> None:
    # 300 tiles of 8192 key blocks on 16000 SMs want 32 splits: 32 x 300 x 128 rows x 130 floats is
    # 639 MB, past the default 512 MiB, so the launch runs unsplit; a larger limit takes the split
    p = cp.params(300, 1, 128, 1 << 20)
    d = cp.plan_of(p, sms=16000)
    assert (d["splits"], d["workspace_bytes"], d["kind"]) == (1, 0, "sm90_main")
    big = cp.plan_of(p, sms=16000, max_workspace=8 << 30)
    assert big["splits"] == 32 and big["workspace_bytes"] == 32 * 300 * 128 * 130 * 4 > MAX_WS


def test_tma_inexpressible_strides_plan_the_fallback_in_whole_batches() -> None:
    sk = 256
    zero_batch = {n: (0, s * 128, 128, 1) for n, s in (("q", 64), ("k", sk), ("v", sk), ("o", 64))}
    d = cp.plan_of(cp.params(4, 8, 64, sk, zero_batch))
    assert d["kind"] == "sm80_mma_sync" and (d["grid"][0], d["grid"][1]) == (1, 32)
    zero = {n: (0, s * 128, 128, 1) for n, s in (("q", 64), ("k", sk), ("v", sk), ("o", 64))}
    wide = cp.plan_of(cp.params(3, 40000, 64, sk, zero))
    assert wide["kind"] == "sm80_mma_sync" and wide["grid"][1] == 40000  # one batch a launch
    with pytest.raises(cp.PlanError, match="launches at most 65535 heads") as e:
        cp.plan_of(cp.params(2, 70000, 64, sk, zero))
    assert e.value.code == 3


def test_bad_input_is_refused_by_the_kernels_validation() -> None:
    p = cp.params(1, 1, 1, 1)
    p.head_dim = 64
    with pytest.raises(cp.PlanError, match="head_dim 64 is not supported") as e:
        cp.plan_of(p)
    assert e.value.code == 2
    p = cp.params(1, 1, 1, 1)
    p.q = 8
    with pytest.raises(cp.PlanError, match="q is not 16-byte aligned"):
        cp.plan_of(p)
    with pytest.raises(cp.PlanError, match="0 SMs"):
        cp.plan_of(cp.params(1, 1, 1, 1), sms=0)


@pytest.mark.parametrize(
    ("flags", "shape", "kind"),
    [
        (("-DRA_CUDA_FORCE_MMA_SYNC=1",), (1, 32, 1, 8192), "sm80_mma_sync"),
        (("-DRA_CUDA_TAIL_SPLIT=0",), (1, 200, 100, 2000), "sm90_main"),
        (("-DRA_CUDA_LONG_BLOCK_N=0",), (4, 16, 4096, 4097), "sm90_tail_split"),
        (("-DRA_CUDA_SHORT_BLOCK_N=0",), (2, 40, 1024, 77), "sm90_main_next_qk"),
        (("-DRA_CUDA_DYN_SCHED=0",), (256, 32, 128, 128), "sm90_main_next_qk"),
        (("-DRA_CUDA_MERGE_KERNEL=1",), (1, 32, 1, 8192), "sm90_main"),
        (("-DRA_CUDA_NEXT_QK=0",), (2, 40, 1024, 77), "sm90_main"),
        (("-DRA_CUDA_SPLIT=1",), (1, 32, 1, 8192), "sm90_main"),
    ],
)
def test_build_flags_reach_the_planner(flags: tuple[str, ...], shape: tuple[int, ...], kind: str) -> None:
    assert cp.plan(*shape, flags=flags)["kind"] == kind


def test_a_value_outside_the_flag_table_does_not_compile() -> None:
    with pytest.raises(RuntimeError, match="RA_CUDA_EPILOGUE must be 0\\|1\\|2"):
        cp.host_library(("-DRA_CUDA_EPILOGUE=7",))


def test_forced_tail_parts_never_leave_one_empty() -> None:
    for n in (3, 8, 64):
        d = cp.plan(4, 100, 65, 1000, flags=(f"-DRA_CUDA_TAIL_SPLIT={n}",))
        invariants(d, 4, 100, 65, 1000)
        assert d["kind"] == "sm90_tail_split" and d["tail_splits"] == min(n, 8)


shapes = st.tuples(
    st.integers(1, 64),
    st.integers(1, 128),
    st.one_of(st.integers(1, 300), st.integers(1, 20000)),
    st.one_of(st.integers(1, 300), st.integers(1, 40000)),
)


@settings(max_examples=300, deadline=None)
@given(shapes, st.sampled_from([1, 8, 78, 114, 132]))
def test_every_plan_keeps_the_invariants(shape: tuple[int, int, int, int], sms: int) -> None:
    b, h, sq, sk = shape
    invariants(cp.plan_of(cp.params(b, h, sq, sk), sms=sms), b, h, sq, sk, sms=sms)


@settings(max_examples=100, deadline=None)
@given(shapes, st.integers(1, 1 << 24))
def test_a_workspace_limit_is_never_exceeded(shape: tuple[int, int, int, int], limit: int) -> None:
    d = cp.plan_of(cp.params(*shape), max_workspace=limit)
    assert d["workspace_bytes"] <= limit
    invariants(d, *shape, max_ws=limit)


# ---- ABI v2 (issue 40): plan.h's rule 0, the v2 kernels ------------------------------------------


def v2_params(b: int, h: int, sq: int, sk: int, **kw: object) -> object:
    """BSHD params with ABI v2 fields (regress.native.plan.shape_params' keywords)."""
    return shape_params(b, h, sq, sk, **kw)  # type: ignore[arg-type]


# (B, H, Sq, Sk, v2 keywords) -> the kernel the default build plans
# RA_CUDA_GQA_ROWS: 1 (the default since the H200 measured it, 2026-12-05) runs a GQA decode and BSHD MQA
# as their dense call; the v2 planner's own tests below plan with it 0. Stated both ways, so a changed
# default cannot pass these tests by accident.
ROWS = ("-DRA_CUDA_GQA_ROWS=1",)
NO_ROWS = ("-DRA_CUDA_GQA_ROWS=0",)

V2_TABLE = [
    ((2, 32, 8192, 8192), dict(heads_kv=8, mask="causal_top_left"), "sm90_v2_causal"),
    ((4, 32, 4096, 4096), dict(heads_kv=8), "sm90_v2"),  # non-causal GQA: 32 rows a head, no packing
    ((2, 8, 1024, 1024), dict(lse=True), "sm90_v2"),  # the LSE alone is a v2 call
    ((16, 32, 1, 8192), dict(heads_kv=8, mask="causal_bottom_right"), "sm90_v2_packgqa_causal"),
    ((4, 32, 16, 8192), dict(heads_kv=8), "sm90_v2_packgqa"),  # speculative decode, 16 rows x 4 heads
    (
        (64, 32, 26000, 26000),
        dict(heads_kv=8, mask="causal_bottom_right", max_seqlen=(8000, 8000)),
        "sm90_v2_varlen_packgqa_causal",
    ),
    ((64, 32, 26000, 26000), dict(heads_kv=32, max_seqlen=(8000, 8000)), "sm90_v2_varlen"),  # MHA: no pack
    ((64, 32, 64, 64000), dict(heads_kv=8, max_seqlen=(1, 1000)), "sm90_v2_varlen_packgqa"),
    (
        (64, 32, 64, 64000),
        dict(heads_kv=8, mask="causal_bottom_right", max_seqlen=(1, 1000)),
        "sm90_v2_varlen_packgqa_causal",
    ),
    ((2, 32, 2048, 2048), dict(heads_kv=32, mask="causal_bottom_right"), "sm90_v2_causal"),  # MHA causal
]


def v2_invariants(
    d: dict, b: int, h: int, sq: int, sk: int, kw: dict, max_ws: int = MAX_WS, sms: int = SMS
) -> None:
    kind = d["kind"]
    assert kind.startswith("sm90_v2"), kind
    assert ("causal" in kind) == (kw.get("mask", "none") != "none")
    varlen = kw.get("max_seqlen") is not None
    assert ("varlen" in kind) == varlen
    hk = kw.get("heads_kv") or h
    g = h // hk
    assert d["threads"] == 384 and d["splits"] == 1 and d["tail_splits"] == 0 and d["merge"] == 0
    assert 0 < d["shared_bytes"] <= SMEM_LIMIT and d["block_k"] == 128
    rows = d["block_q"]  # query rows a tile holds: 128, or (packed) g heads x R rows
    if "packgqa" in kind:
        assert rows % g == 0 and rows <= 128 and (rows // g) & (rows // g - 1) == 0
        heads_of_tile, r = hk, rows // g
    else:
        assert rows == 128
        heads_of_tile, r = h, 128
    if varlen:
        entries = -(-sq // r) + b  # the pre-pass's bound: ceil(total / R) + sequences
        assert d["tiles"] == entries * heads_of_tile
        if d["dynamic_scheduler"]:
            assert d["workspace_bytes"] == 16 + entries * 32 + 8
    else:
        assert d["tiles"] == b * heads_of_tile * -(-sq // r)
        assert d["workspace_bytes"] == (8 if d["dynamic_scheduler"] else 0)
    assert d["workspace_bytes"] <= max_ws
    assert d["grid"][0] == min(d["tiles"], sms) and d["grid"][1:] == [1, 1]


@pytest.mark.parametrize(("shape", "kw", "kind"), V2_TABLE, ids=[f"{s}-{k}" for s, _, k in V2_TABLE])
def test_v2_calls_plan_a_v2_kernel(shape: tuple[int, int, int, int], kw: dict, kind: str) -> None:
    d = cp.plan_of(v2_params(*shape, **kw), flags=NO_ROWS)
    assert d["kind"] == kind, d
    assert d["dynamic_scheduler"] == 1
    v2_invariants(d, *shape, kw)


def test_packing_takes_the_fewest_rows() -> None:
    """pack_gqa_log2_rows: decode's one row a head packs 4 heads x 1 row into one tile (a warpgroup);
    at 2k rows a head packing computes no fewer rows, so each head keeps its own tiles."""
    assert cp.plan_of(v2_params(16, 32, 1, 8192, heads_kv=8), flags=NO_ROWS)["block_q"] == 4
    assert cp.plan_of(v2_params(4, 32, 16, 8192, heads_kv=8))["block_q"] == 64
    assert cp.plan_of(v2_params(4, 32, 100, 8192, heads_kv=8))["kind"] == "sm90_v2"
    assert cp.plan_of(v2_params(1, 32, 2048, 2048, heads_kv=8))["kind"] == "sm90_v2"
    three = cp.plan_of(
        v2_params(1, 24, 1, 512, heads_kv=8), flags=NO_ROWS
    )  # 3 heads a group: not a power of 2
    assert three["kind"] == "sm90_v2"
    d = cp.plan(16, 32, 1, 8192)  # dense MHA decode: the dense kernels, unchanged
    assert not d["kind"].startswith("sm90_v2")
    off = cp.plan_of(v2_params(16, 32, 1, 8192, heads_kv=8), flags=("-DRA_CUDA_PACK_GQA=0", *NO_ROWS))
    assert off["kind"] == "sm90_v2" and off["block_q"] == 128
    # a long prompt: 8 fewer rows in 7697 would pack at "fewer" (FlashAttention-3 asks for 10 %)
    causal = v2_params(1, 32, 7697, 7697, heads_kv=8, mask="causal_top_left")
    assert cp.plan_of(causal)["kind"] == "sm90_v2_causal"
    assert cp.plan_of(causal, flags=("-DRA_CUDA_PACK_GQA=2",))["kind"] == "sm90_v2_packgqa_causal"
    # varlen always packs (FlashAttention-3's rule): 4 heads x 32 rows at a longest sequence of 7697
    mix = v2_params(64, 32, 26000, 26000, heads_kv=8, max_seqlen=(7697, 7697))
    assert cp.plan_of(mix)["kind"] == "sm90_v2_varlen_packgqa" and cp.plan_of(mix)["block_q"] == 128
    assert cp.plan_of(mix, flags=("-DRA_CUDA_PACK_GQA=0",))["kind"] == "sm90_v2_varlen"


def test_v2_workspace_and_its_limit() -> None:
    """A fixed-length v2 launch takes the counter's 8 bytes, or without them the static order; a
    varlen one cannot run without its tile list (ra_attention_fwd refuses it then)."""
    p = v2_params(2, 32, 8192, 8192, heads_kv=8, mask="causal_top_left")
    assert cp.plan_of(p, max_workspace=4)["dynamic_scheduler"] == 0
    assert cp.plan_of(p, max_workspace=4)["workspace_bytes"] == 0
    v = v2_params(4, 8, 1000, 1000, max_seqlen=(600, 600))
    d = cp.plan_of(v)
    assert d["workspace_bytes"] == 16 + (-(-1000 // 128) + 4) * 32 + 8
    assert cp.plan_of(v, max_workspace=64)["workspace_bytes"] == 0


def test_v2_on_fallback_strides_is_refused() -> None:
    """The mma.sync fallback has no v2 feature: a GQA call whose K/V only it can address is refused
    (RA_ERR_UNSUPPORTED, naming the path), never planned as a dense fallback; so is every v2 call of
    a FORCE_MMA_SYNC build."""
    p = v2_params(4, 8, 64, 256, heads_kv=2)
    p.k_stride[:] = (0, 256 * 128, 128, 1)
    with pytest.raises(cp.PlanError, match="TMA path only") as e:
        cp.plan_of(p)
    assert e.value.code == 9
    with pytest.raises(cp.PlanError, match="TMA path only"):
        cp.plan_of(v2_params(1, 4, 64, 64, mask="causal_top_left"), flags=("-DRA_CUDA_FORCE_MMA_SYNC=1",))


v2_shapes = st.tuples(
    st.integers(1, 16),
    st.sampled_from([1, 2, 4, 8, 16]),  # K/V heads
    st.sampled_from([1, 2, 3, 4, 8]),  # query heads per K/V head
    st.one_of(st.integers(1, 300), st.integers(1, 20000)),
    st.one_of(st.integers(1, 300), st.integers(1, 40000)),
    st.sampled_from(["none", "causal_top_left", "causal_bottom_right"]),
    st.booleans(),  # varlen
)


@settings(max_examples=300, deadline=None)
@given(v2_shapes, st.sampled_from([1, 8, 132]), st.integers(0, 1 << 20))
def test_every_v2_plan_keeps_the_invariants(shape: tuple, sms: int, limit: int) -> None:
    b, hk, g, sq, sk, mask, varlen = shape
    h = hk * g
    kw: dict = {"heads_kv": hk, "mask": mask, "lse": g == 1 and mask == "none"}
    if varlen:  # b sequences packed: totals >= b, the longest no more than the totals
        sq, sk = max(sq, b), max(sk, b)
        kw["max_seqlen"] = (-(-sq // b) + (sq % 7), -(-sk // b))
        kw["max_seqlen"] = (min(kw["max_seqlen"][0], sq), kw["max_seqlen"][1])
    d = cp.plan_of(v2_params(b, h, sq, sk, **kw), flags=NO_ROWS, sms=sms, max_workspace=limit or MAX_WS)
    v2_invariants(d, b, h, sq, sk, kw, max_ws=limit or MAX_WS, sms=sms)


# ---- RA_CUDA_GQA_ROWS (issue 40): a GQA call whose query heads are rows of one dense head -----------


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("mask", ["none", "causal_bottom_right"])
def test_gqa_rows_takes_a_decode_to_the_dense_split(layout: str, mask: str) -> None:
    """(1, 32/8, 1, 8192) under the flag (the default): the dense decode of 8 heads x 4 rows
    (kernel/common/gqa_rows.h), split over keys and merged in the kernel, the plan of the dense
    (1, 8, 4, 8192) call; with the flag 0 the v2 kernel's 8 packed tiles on 132 SMs."""
    p = v2_params(1, 32, 1, 8192, heads_kv=8, mask=mask, layout=layout)
    on = cp.plan_of(p, flags=ROWS)
    assert on["kind"] == "sm90_merge_in_kernel" and on["splits"] > 1 and on["merge"] == 1, on
    assert on == cp.plan(1, 8, 4, 8192, flags=ROWS)
    invariants(on, 1, 8, 4, 8192)
    assert cp.plan_of(p) == on  # the default build
    off = cp.plan_of(p, flags=NO_ROWS)
    assert off["kind"].startswith("sm90_v2_packgqa") and off["splits"] == 1 and off["tiles"] == 8, off
    assert cp.build_info()["gqa_rows"] == 1 and cp.build_info(NO_ROWS)["gqa_rows"] == 0
    four = cp.plan_of(v2_params(4, 32, 1, 8192, heads_kv=8, mask=mask, layout=layout), flags=ROWS)
    assert four["splits"] > 1 and four == cp.plan(4, 8, 4, 8192, flags=ROWS)
    # 16 sequences: 128 dense tiles already fill the machine, so no split (the v2 kernel's 128 tiles too)
    sixteen = cp.plan_of(v2_params(16, 32, 1, 8192, heads_kv=8, mask=mask), flags=ROWS)
    assert sixteen == cp.plan(16, 8, 4, 8192)


@pytest.mark.parametrize("flags", [ROWS, NO_ROWS], ids=["gqa_rows", "no_gqa_rows"])
@pytest.mark.parametrize(
    "kw",
    [
        dict(heads_kv=8, lse=True),
        dict(heads_kv=8, max_seqlen=(1, 4000)),
        dict(heads_kv=8, mask="causal_top_left"),
    ],
    ids=["lse", "varlen", "top-left"],
)
def test_gqa_rows_leaves_what_the_view_refuses_on_v2(flags: tuple[str, ...], kw: dict) -> None:
    sq, sk = (64, 64000) if "max_seqlen" in kw else (1, 8192)
    d = cp.plan_of(v2_params(16 if "max_seqlen" in kw else 1, 32, sq, sk, **kw), flags=flags)
    assert d["kind"].startswith("sm90_v2"), d
    assert d == cp.plan_of(v2_params(16 if "max_seqlen" in kw else 1, 32, sq, sk, **kw), flags=NO_ROWS)


@settings(max_examples=200, deadline=None)
@given(v2_shapes, st.sampled_from([1, 8, 132]), st.integers(0, 1 << 20))
def test_gqa_rows_plans_the_viewed_dense_call_or_the_default(shape: tuple, sms: int, limit: int) -> None:
    """Under the flag a call the view takes (decode without a top-left mask, or BSHD MQA without a
    mask; no varlen, no LSE) plans exactly as the dense call of heads_kv heads and seqlen_q x group
    rows; every other call as the default build plans it."""
    b, hk, g, sq, sk, mask, varlen = shape
    h = hk * g
    kw: dict = {"heads_kv": hk, "mask": mask, "lse": g == 1 and mask == "none"}
    if varlen:
        sq, sk = max(sq, b), max(sk, b)
        kw["max_seqlen"] = (min(-(-sq // b), sq), -(-sk // b))
    ws = limit or MAX_WS
    p = v2_params(b, h, sq, sk, **kw)
    on = cp.plan_of(p, flags=ROWS, sms=sms, max_workspace=ws)
    taken = (
        g > 1
        and not varlen
        and (
            (sq == 1 and mask != "causal_top_left") or (hk == 1 and mask == "none")  # decode; BSHD MQA
        )
    )
    if taken:
        assert on == cp.plan_of(cp.params(b, hk, sq * g, sk), flags=ROWS, sms=sms, max_workspace=ws)
        invariants(on, b, hk, sq * g, sk, max_ws=ws, sms=sms)
    else:
        assert on == cp.plan_of(p, flags=NO_ROWS, sms=sms, max_workspace=ws)
