"""The gfx942 v2 kernels (issue 40: grouped-query heads, causal masks in both alignments, varlen and the
LSE) executed on the hip-emu emulator, against the exact fp64 reference: the contract (scaled ULP <=
1.5 / 1.5 / 2.0, NaN/Inf positions, +0 and LSE -inf where a row sees no key), the LSE within 64 fp32
ulps of max(|lse|, 1) (tests/kernel/test_cpu_v2.py's tolerance), and against themselves bit for bit
(GQA is MHA over repeated K/V heads, a varlen sequence is its own dense call, the v2 kernel without a
mask is the dense kernel, two launches agree). Outputs and LSE start poisoned, so a row never written
shows; a varlen output sits between guard rows that must survive. Small shapes: the emulator runs
every wave of every launch on this machine's CPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from staircase import assert_finite_bits_kept, plant_nonfinite

from regress.emu.library import EmuLibrary
from regress.facts import numerics as nm
from regress.facts.results import MASKS
from regress.kernel import reference
from regress.native.build import build_kernel
from regress.native.plan import plan_launch

pytestmark = pytest.mark.skipif(
    not (shutil.which("clang-19") and shutil.which("llvm-objdump-19")),
    reason="clang-19 and llvm-objdump-19 build and decode the gfx942 code object",
)

LIMIT = {"rtne": 1.5, "rtna": 1.5, "rtz": 2.0}
LSE_ULPS = 64
POISON = 0x7FA1  # a NaN no kernel writes
GUARD = 0x1234


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> EmuLibrary:
    cache: Path = tmp_path_factory.mktemp("gfx942-v2")
    return EmuLibrary(build_kernel("hip", compile_only=True, cache_dir=cache).path)


def realistic(shape: tuple[int, ...], g: torch.Generator, kind: str) -> torch.Tensor:
    """ANCHORS.md's realistic inputs: Q, V ~ N(0,1); K rows with log-normal norms (sigma 0.6)."""
    t = torch.randn(shape, generator=g)
    if kind == "k":
        norms = torch.exp(0.6 * torch.randn((*shape[:-1], 1), generator=g))
        t = t / t.norm(dim=-1, keepdim=True) * norms * 128**0.5
    return t.bfloat16()


def poisoned(shape: tuple[int, ...], value: int = POISON) -> torch.Tensor:
    return torch.full(shape, value, dtype=torch.int16).view(torch.bfloat16)


def check_contract(o_bits: np.ndarray, lse: torch.Tensor, ref: reference.Reference, mode: str) -> float:
    """The contract for one output (o_bits in the reference's layout) and its LSE; the max scaled ULP."""
    assert not (o_bits == POISON).any(), "an output element was never written"
    ref_bits = nm.reference_bits(ref.ref, mode)  # type: ignore[arg-type]
    nonfinite = nm.is_nonfinite_bits(ref_bits) | nm.is_nonfinite_bits(o_bits)
    assert np.array_equal(nm.canonicalize_nan(o_bits[nonfinite]), nm.canonicalize_nan(ref_bits[nonfinite]))
    finite = ~nonfinite
    su = float(nm.scaled_ulp(o_bits, ref.ref, ref.mag)[finite].max()) if finite.any() else 0.0
    assert su <= LIMIT[mode], su
    got = lse.numpy().astype(np.float64)
    assert not (got == 12345.0).any(), "an LSE entry was never written"
    assert np.array_equal(np.isneginf(got), np.isneginf(ref.lse)), "-inf LSE rows differ"
    fin = np.isfinite(ref.lse)
    tol = LSE_ULPS * np.spacing(np.maximum(np.abs(ref.lse[fin]), 1.0).astype(np.float32)).astype(np.float64)
    assert (np.abs(got[fin] - ref.lse[fin]) <= tol).all(), np.abs(got[fin] - ref.lse[fin]).max()
    return su


# b, h, hk, sq, sk, layout: GQA 2 and MQA, MHA; Sq < Sk, Sq > Sk (bottom-right rows with no key and a
# q-block none of whose rows sees a key), equal; two q-blocks, partial key tiles, a decode row
DENSE = [
    (1, 2, 1, 40, 70, "bshd"),
    (1, 2, 1, 300, 30, "bhsd"),
    (2, 2, 2, 257, 257, "bshd"),
    (1, 4, 2, 1, 130, "bhsd"),
]


@pytest.mark.slow  # a gfx942 build and 36 emulated launches
@pytest.mark.parametrize("mode", ["rtne", "rtna", "rtz"])
@pytest.mark.parametrize(("b", "h", "hk", "sq", "sk", "layout"), DENSE, ids=[str(s[:5]) for s in DENSE])
def test_dense_v2_within_contract(
    lib: EmuLibrary, b: int, h: int, hk: int, sq: int, sk: int, layout: str, mode: str
) -> None:
    g = torch.Generator().manual_seed(sq * 7 + sk)
    q = realistic((b, sq, h, 128), g, "q")
    k = realistic((b, sk, hk, 128), g, "k")
    v = realistic((b, sk, hk, 128), g, "v")
    if layout == "bhsd":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    for mask in MASKS:
        out = poisoned(tuple(q.shape))
        lse = torch.full((b, h, sq), 12345.0)
        lib.forward(q, k, v, layout=layout, rounding=mode, mask=mask, out=out, lse=lse)  # type: ignore[arg-type]
        assert lib.last_plan is not None and lib.last_plan["kind"] == "gfx942_v2"
        ref = reference.reference_full(q, k, v, layout=layout, mask=mask)  # type: ignore[arg-type]
        o_bits = reference.to_bhsd_bits(out, layout)  # type: ignore[arg-type]
        check_contract(o_bits, lse, ref, mode)
        n = reference.visible_keys(mask, sq, sk)  # type: ignore[arg-type]
        assert (o_bits[..., n == 0, :] == 0).all(), "a row with no visible key is not +0"


# lengths 0 and 1, a sequence past one q-block, keys past one key tile, odd lengths
VARLEN = [
    [(1, 0), (0, 3), (1, 1), (130, 130), (17, 100), (0, 0), (100, 17), (64, 64)],
    [(260, 5), (1, 200), (3, 3)],
]


@pytest.mark.slow  # emulated varlen launches and each sequence's own call
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("lens", VARLEN, ids=[f"varlen{i}" for i in range(len(VARLEN))])
def test_varlen_within_contract_and_equal_to_per_sequence_calls(
    lib: EmuLibrary, lens: list[tuple[int, int]], mask: str
) -> None:
    h, hk, mode = 4, 2, "rtna"
    g = torch.Generator().manual_seed(len(lens))
    cq = torch.tensor([0, *np.cumsum([a for a, _ in lens])], dtype=torch.int32)
    ck = torch.tensor([0, *np.cumsum([c for _, c in lens])], dtype=torch.int32)
    tq, tk = int(cq[-1]), int(ck[-1])
    q, k, v = (
        realistic((tq, h, 128), g, "q"),
        realistic((tk, hk, 128), g, "k"),
        realistic((tk, hk, 128), g, "v"),
    )
    big = poisoned((tq + 6, h, 128), GUARD)
    big[3 : 3 + tq] = poisoned((tq, h, 128))
    out = big[3 : 3 + tq]
    lse = torch.full((h, tq), 12345.0)
    mq, mk = max(a for a, _ in lens), max(c for _, c in lens)
    lib.forward(
        q, k, v, rounding=mode, mask=mask, cu_seqlens_q=cq, cu_seqlens_k=ck,  # type: ignore[arg-type]
        max_seqlen_q=mq, max_seqlen_k=mk, out=out, lse=lse,
    )  # fmt: skip
    guards = torch.cat([big[:3], big[3 + tq :]]).view(torch.int16)
    assert bool((guards == GUARD).all()), "a row outside the packed output was written"
    ref = reference.reference_varlen(q, k, v, cq, ck, mask=mask)  # type: ignore[arg-type]
    check_contract(reference.tensor_bits(out), lse, ref, mode)
    for i in range(len(lens)):  # bit for bit the dense call of each sequence (LSE included)
        q0, q1, k0, k1 = int(cq[i]), int(cq[i + 1]), int(ck[i]), int(ck[i + 1])
        if q1 == q0:
            continue
        if k1 == k0:
            assert (reference.tensor_bits(out[q0:q1]) == 0).all() and bool(
                torch.isneginf(lse[:, q0:q1]).all()
            )
            continue
        dl = torch.empty(1, h, q1 - q0)
        d = lib.forward(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], rounding=mode, mask=mask, lse=dl)  # type: ignore[arg-type]
        assert np.array_equal(reference.tensor_bits(d[0]), reference.tensor_bits(out[q0:q1])), i
        assert np.array_equal(dl[0].numpy().view(np.uint32), lse[:, q0:q1].numpy().view(np.uint32)), i


@pytest.mark.slow  # emulated launches
@pytest.mark.parametrize("mask", MASKS)
def test_gqa_is_mha_over_repeated_heads_and_the_dense_kernel_bit_for_bit(lib: EmuLibrary, mask: str) -> None:
    """Each query row does the same arithmetic whichever K/V head serves it; without a mask the v2
    kernel (made to run by the LSE) gives the dense kernel's bits; a second launch the same bits."""
    g = torch.Generator().manual_seed(5)
    q = realistic((1, 70, 4, 128), g, "q")
    k = realistic((1, 90, 2, 128), g, "k")
    v = realistic((1, 90, 2, 128), g, "v")
    got = lib.forward(q, k, v, mask=mask)  # type: ignore[arg-type]
    rep = [t.repeat_interleave(2, dim=2) for t in (k, v)]
    lse = torch.empty(1, 4, 70)
    want = lib.forward(q, rep[0], rep[1], mask=mask, lse=lse)  # type: ignore[arg-type]
    assert lib.last_plan is not None and lib.last_plan["kind"] == "gfx942_v2"
    assert np.array_equal(reference.tensor_bits(got), reference.tensor_bits(want))
    again = lib.forward(q, k, v, mask=mask)  # type: ignore[arg-type]
    assert np.array_equal(reference.tensor_bits(got), reference.tensor_bits(again))
    if mask == "none":
        dense = lib.forward(q, rep[0], rep[1])
        assert lib.last_plan is not None and lib.last_plan["kind"] == "gfx942_dense"
        assert np.array_equal(reference.tensor_bits(dense), reference.tensor_bits(want))


@pytest.mark.slow  # emulated launches
def test_square_causal_alignments_agree_and_fully_masked_tiles_are_skipped(lib: EmuLibrary) -> None:
    """Sq = Sk: both alignments are one mask. A causal q-block runs only the key tiles up to its last
    row: the first of 300 rows' two q-blocks reads 4 of 5 K/V tiles, so the causal call moves fewer
    bytes than the unmasked one, apart from the look at its diagonal's V rows (parts/stair.h: rows
    n_first .. n_last of each q-block, 256 bytes each)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (realistic((1, 300, 1, 128), g, x) for x in "qkv")
    tl = lib.forward(q, k, v, mask="causal_top_left")
    causal_bytes = lib.last_trace.global_bytes_read if lib.last_trace else 0
    br = lib.forward(q, k, v, mask="causal_bottom_right")
    assert np.array_equal(reference.tensor_bits(tl), reference.tensor_bits(br))
    lib.forward(q, k, v, lse=torch.empty(1, 1, 300))
    full_bytes = lib.last_trace.global_bytes_read if lib.last_trace else 0
    n = reference.visible_keys("causal_top_left", 300, 300)
    stair_bytes = sum(int(n[min(r + 255, 299)] - n[r]) * 256 for r in range(0, 300, 256))
    assert 0 < causal_bytes - stair_bytes < full_bytes


@pytest.mark.slow  # emulated launches
def test_keys_no_row_of_a_block_sees_are_never_read(lib: EmuLibrary) -> None:
    """NaN K and Inf V rows where no row of a q-block may look (the next packed sequence, keys past a
    causal block's last row) do not reach it: the copies' buffer range ends at the block's last
    visible key, so those rows load as zeros. (A key that some rows of the block see and others do
    not still meets P = 0 there: docs/numerics.md §1b's gap, shared with the sm_90a kernel.)"""
    g = torch.Generator().manual_seed(11)
    cq = torch.tensor([0, 100, 190], dtype=torch.int32)
    ck = torch.tensor([0, 70, 200], dtype=torch.int32)
    q = realistic((190, 2, 128), g, "q")
    k, v = realistic((200, 2, 128), g, "k"), realistic((200, 2, 128), g, "v")
    k[70:], v[70:] = float("nan"), float("inf")  # sequence 1's keys
    out = lib.forward(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=100, max_seqlen_k=130)
    ref = reference.reference_varlen(q[:100], k[:70], v[:70], cq[:2], ck[:2])
    check_contract(reference.tensor_bits(out[:100]), torch.zeros(2, 100), _no_lse(ref), "rtna")
    q, k, v = (realistic((1, 300, 1, 128), g, x) for x in "qkv")
    k[:, 256:], v[:, 256:] = float("nan"), float("inf")  # past q-block 0's last row (255)
    out = lib.forward(q, k, v, mask="causal_top_left")
    ref = reference.reference_full(q[:, :256], k[:, :256], v[:, :256], layout="bshd", mask="causal_top_left")
    o_bits = reference.to_bhsd_bits(out[:, :256], "bshd")
    check_contract(o_bits, torch.zeros(1, 1, 256), _no_lse(ref), "rtna")


def _no_lse(ref: reference.Reference) -> reference.Reference:
    """The reference with every LSE 0 (for calls that write none; the test passes zeros)."""
    return reference.Reference(ref.ref, ref.mag, np.zeros_like(ref.lse))


@pytest.mark.slow  # emulated launches
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_gqa_decode_as_dense_rows_gives_the_v2_kernels_bits(lib: EmuLibrary, layout: str) -> None:
    """A GQA call whose query heads of one K/V head are rows of one dense head of more than 32 rows
    (parts/plan.h's gfx942_gqa_rows, kernel/common/gqa_rows.h; 32 rows or fewer take the decode kernels,
    test_decode_kernels_spread_a_blocks_keys_over_its_waves) runs the dense kernel over the rows: every
    row does the v2 kernel's arithmetic (the LSE keeps a call on the v2 kernel), so the bits are equal,
    unmasked and bottom-right, a decode of 64 query heads a K/V head and BSHD MQA rows of 40 queries;
    with the tail split (16 key tiles on 304 CUs) the contract holds and a second launch gives the same
    bits."""
    g = torch.Generator().manual_seed(17)

    def qkv(b: int, sq: int, h: int, sk: int, hk: int) -> tuple[torch.Tensor, ...]:
        t = (
            realistic((b, sq, h, 128), g, "q"),
            realistic((b, sk, hk, 128), g, "k"),
            realistic((b, sk, hk, 128), g, "v"),
        )
        return tuple(x.transpose(1, 2).contiguous() for x in t) if layout == "bhsd" else t

    def rows_then_v2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: str = "none") -> None:
        got = lib.forward(q, k, v, layout=layout, mask=mask, out=poisoned(tuple(q.shape)))  # type: ignore[arg-type]
        assert lib.last_plan is not None and lib.last_plan["kind"] == "gfx942_gqa_rows"
        lse = torch.empty(
            q.shape[0], q.shape[2 if layout == "bshd" else 1], q.shape[1 if layout == "bshd" else 2]
        )
        want = lib.forward(q, k, v, layout=layout, mask=mask, lse=lse)  # type: ignore[arg-type]
        assert lib.last_plan is not None and lib.last_plan["kind"] == "gfx942_v2"
        assert np.array_equal(reference.tensor_bits(got), reference.tensor_bits(want)), mask

    q, k, v = qkv(1, 1, 64, 300, 1)
    for mask in ("none", "causal_bottom_right"):
        rows_then_v2(q, k, v, mask)
    if layout == "bshd":
        rows_then_v2(*qkv(1, 40, 4, 70, 1))
    q, k, v = qkv(1, 1, 64, 1000, 1)
    for mode in ("rtne", "rtz"):
        split = lib.forward(q, k, v, layout=layout, rounding=mode, out=poisoned(tuple(q.shape)))  # type: ignore[arg-type]
        assert lib.last_plan is not None and lib.last_plan["kind"] == "gfx942_gqa_rows_split"
        ref = reference.reference_full(q, k, v, layout=layout)  # type: ignore[arg-type]
        bits = reference.to_bhsd_bits(split, layout)  # type: ignore[arg-type]
        check_contract(bits, torch.zeros(1, 64, 1), _no_lse(ref), mode)
        again = lib.forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
        assert np.array_equal(reference.tensor_bits(split), reference.tensor_bits(again))


# The v2 tail split (parts/plan.h, gfx942_v2_split) on a small emulated device, so a small call has a
# partial last round: b, h, hk, sq, sk, cus. GQA prefill 6/2 on 4 CUs (heads 0-3 dense, the last
# round's heads 4-5 split in 2 parts of 7 and 6 key tiles); MHA with an LSE, 2 q-blocks a head (the
# second partial) on 4 CUs: the v2 numbering's last round is q-block 0 of heads 1 and 2; the same on
# 304 CUs: every q-block split, no v2 launch.
V2_SPLIT = [(1, 6, 2, 40, 777, 4), (1, 3, 3, 300, 777, 4), (1, 3, 3, 300, 777, 304)]


@pytest.mark.slow  # emulated split, merge and unsplit launches: ~2 min
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize(
    ("b", "h", "hk", "sq", "sk", "cus"), V2_SPLIT, ids=["gqa_cus4", "lse_cus4", "lse_cus304"]
)
def test_v2_tail_split_meets_the_contract_and_keeps_the_lse(
    lib: EmuLibrary, b: int, h: int, hk: int, sq: int, sk: int, cus: int, layout: str
) -> None:
    """Each mode against fp64 (the contract, the LSE within its documented bound) and against the
    unsplit v2 launch (a 1-CU device: whole rounds, never split): the q-blocks the v2 launch ran give
    its bits, the split ones differ (merged parts) but keep its NaN/Inf outputs and LSE classes; a
    second launch repeats every bit of the output and the LSE. Heads 1 and 2 of the MHA call carry an
    +Inf key (NaN rows) and a NaN value."""
    split, whole = EmuLibrary(lib.path, cus=cus), EmuLibrary(lib.path, cus=1)
    g = torch.Generator().manual_seed(sq + h)
    q = realistic((b, sq, h, 128), g, "q")
    k = realistic((b, sk, hk, 128), g, "k")
    v = realistic((b, sk, hk, 128), g, "v")
    if hk == h:
        k[0, 5, 1] = float("inf")
        v[0, 700, 2, 3] = float("nan")
    if layout == "bhsd":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    ref = reference.reference_full(q, k, v, layout=layout)  # type: ignore[arg-type]
    plan = plan_launch("hip", b, h, sq, sk, compute_units=cus, layout=layout, heads_kv=hk, lse=True)
    assert plan["kind"] == "gfx942_v2_split"
    wgs, tail = plan["tiles"], plan["split_tiles"]
    kinds = {la["role"] for la in plan["launches"]}
    assert kinds == ({"split", "merge"} if tail == wgs else {"dense", "split", "merge"})
    dense_lin = np.arange(wgs - tail)  # the v2 numbering (heaviest first) of the blocks run unsplit
    ran_dense = {(int(x % (b * h)), int(-(-sq // 256) - 1 - x // (b * h))) for x in dense_lin}
    for mode in ("rtne", "rtna", "rtz"):
        out, lse = poisoned(tuple(q.shape)), torch.full((b, h, sq), 12345.0)
        split.forward(q, k, v, layout=layout, rounding=mode, out=out, lse=lse)  # type: ignore[arg-type]
        assert split.last_plan is not None and split.last_plan["kind"] == "gfx942_v2_split"
        bits = reference.to_bhsd_bits(out, layout)  # type: ignore[arg-type]
        check_contract(bits, lse, ref, mode)
        w_lse = torch.empty(b, h, sq)
        w = whole.forward(q, k, v, layout=layout, rounding=mode, lse=w_lse)  # type: ignore[arg-type]
        assert whole.last_plan is not None and whole.last_plan["kind"] == "gfx942_v2"
        w_bits = reference.to_bhsd_bits(w, layout)  # type: ignore[arg-type]
        nf = nm.is_nonfinite_bits(w_bits)
        assert np.array_equal(nf, nm.is_nonfinite_bits(bits)) and np.array_equal(bits[nf], w_bits[nf])
        got, want = lse.numpy().astype(np.float64), w_lse.numpy().astype(np.float64)
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
        fin = np.isfinite(want)
        tol = LSE_ULPS * np.spacing(np.maximum(np.abs(want[fin]), 1.0).astype(np.float32)).astype(np.float64)
        assert (np.abs(got[fin] - want[fin]) <= tol).all()
        differs = False
        for bh in range(b * h):
            for qb in range(-(-sq // 256)):
                rows = slice(qb * 256, (qb + 1) * 256)
                same = np.array_equal(bits[bh // h, bh % h, rows], w_bits[bh // h, bh % h, rows])
                if (bh, qb) in ran_dense:
                    lse_bits = (x[bh // h, bh % h, rows].numpy().view(np.uint32) for x in (lse, w_lse))
                    assert same and np.array_equal(*lse_bits), (bh, qb)
                differs |= not same
        assert differs, "no split q-block differs from the unsplit launch: the parts were not merged"
        again_lse = torch.empty(b, h, sq)
        again = split.forward(q, k, v, layout=layout, rounding=mode, lse=again_lse)  # type: ignore[arg-type]
        assert np.array_equal(reference.tensor_bits(again), reference.tensor_bits(out))
        assert np.array_equal(again_lse.numpy().view(np.uint32), lse.numpy().view(np.uint32))
    if hk == h:  # the non-finite inputs reached the outputs they should
        assert nf[0, 1].all() and nf[0, 2, :, 3].all() and not nf[0, 0].any()


# Issue 40's decode kernels: b, Sq, H, Sk, H_kv, mask, plan. 4 rows (one query tile's waves), 32 rows
# (both query tiles), a plain MHA call of 20 rows; 5 keys (waves 2 and 3 of each query tile see no
# key, wave 1 one), 70 (a partial last tile); 1000 and 2000 keys split over 304 CUs.
WAVES = [
    (2, 1, 8, 300, 2, "none", "gfx942_gqa_rows_waves"),
    (2, 1, 8, 300, 2, "causal_bottom_right", "gfx942_gqa_rows_waves"),
    (1, 1, 32, 5, 1, "none", "gfx942_gqa_rows_waves"),
    (1, 20, 2, 70, 2, "none", "gfx942_waves"),
    (1, 1, 4, 1000, 1, "none", "gfx942_gqa_rows_waves_split"),
    (1, 1, 24, 2000, 1, "causal_bottom_right", "gfx942_gqa_rows_waves_split"),
]


@pytest.mark.slow  # emulated launches
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_decode_kernels_spread_a_blocks_keys_over_its_waves(lib: EmuLibrary, layout: str) -> None:
    """A call whose q-block rows fit one wave (seqlen_q <= 32, a GQA decode's view too) runs the
    decode kernels (parts/waves.h): each wave a query tile against a quarter of every key tile, the
    partials merged in LDS in wave order. Against fp64 in every mode, unmasked and bottom-right,
    unsplit and split (the split parts' records through step 10's merge), rows of one and of both
    query tiles, waves whose share holds no key: the contract, NaN/Inf where the reference has them (a
    +Inf key, a NaN value, in the first sequence or head), every output written; a second launch
    gives the same bits. The emulator's waitcnt, LDS-race and MFMA hazard checks run on every launch."""
    g = torch.Generator().manual_seed(29)
    for b, sq, h, sk, hk, mask, kind in WAVES:
        t = [
            realistic((b, sq, h, 128), g, "q"),
            realistic((b, sk, hk, 128), g, "k"),
            realistic((b, sk, hk, 128), g, "v"),
        ]
        if sk >= 70:
            t[1][0, sk // 3, 0] = float("inf")  # sequence 0, K/V head 0: +Inf scores (NaN rows) or -Inf
            t[2][0, sk - 2, hk - 1, 7] = float("nan")  # the last K/V head: a NaN value every row sees
        q, k, v = (x.transpose(1, 2).contiguous() for x in t) if layout == "bhsd" else t
        ref = _no_lse(reference.reference_full(q, k, v, layout=layout, mask=mask))  # type: ignore[arg-type]
        for mode in ("rtne", "rtna", "rtz"):
            out = lib.forward(q, k, v, layout=layout, rounding=mode, mask=mask, out=poisoned(tuple(q.shape)))  # type: ignore[arg-type]
            assert lib.last_plan is not None and lib.last_plan["kind"] == kind, (b, sq, h, sk, lib.last_plan)
            check_contract(reference.to_bhsd_bits(out, layout), torch.zeros(ref.lse.shape), ref, mode)  # type: ignore[arg-type]
            if mode == "rtz":
                again = lib.forward(q, k, v, layout=layout, rounding=mode, mask=mask)  # type: ignore[arg-type]
                assert np.array_equal(reference.tensor_bits(out), reference.tensor_bits(again))
        if sk >= 70:  # the planted specials reached the outputs
            assert not np.isfinite(ref.ref).all()
    # a mixed plan (2 CUs: heads 0 and 1 in the dense launch, head 2 split): the dense launch's
    # q-blocks give the unsplit call's bits (1 CU: never split), the split one the contract
    two, one = EmuLibrary(lib.path, cus=2), EmuLibrary(lib.path, cus=1)
    t = [
        realistic((1, 4, 3, 128), g, "q"),
        realistic((1, 777, 3, 128), g, "k"),
        realistic((1, 777, 3, 128), g, "v"),
    ]
    q, k, v = (x.transpose(1, 2).contiguous() for x in t) if layout == "bhsd" else t
    ref = _no_lse(reference.reference_full(q, k, v, layout=layout))  # type: ignore[arg-type]
    mixed = two.forward(q, k, v, layout=layout, out=poisoned(tuple(q.shape)))  # type: ignore[arg-type]
    assert two.last_plan is not None and two.last_plan["kind"] == "gfx942_waves_split"
    split_plan = plan_launch("hip", 1, 3, 4, 777, compute_units=2, layout=layout, rounding="rtna")
    assert [la["role"] for la in split_plan["launches"]] == ["dense", "split", "merge"]
    whole = one.forward(q, k, v, layout=layout)  # type: ignore[arg-type]
    assert one.last_plan is not None and one.last_plan["kind"] == "gfx942_waves"
    check_contract(reference.to_bhsd_bits(mixed, layout), torch.zeros(ref.lse.shape), ref, "rtna")  # type: ignore[arg-type]
    a, b = reference.to_bhsd_bits(mixed, layout), reference.to_bhsd_bits(whole, layout)  # type: ignore[arg-type]
    assert np.array_equal(a[:, :2], b[:, :2]) and not np.array_equal(a[:, 2], b[:, 2])


# mask, sq, sk, layout: one and two q-blocks on the diagonal, bottom-right with Sq < Sk and Sq > Sk;
# BSHD with 2 heads runs the strided kernels, BHSD the packed ones
STAIR = [
    ("causal_top_left", 300, 300, "bshd"),
    ("causal_top_left", 300, 300, "bhsd"),
    ("causal_bottom_right", 100, 300, "bshd"),
    ("causal_bottom_right", 290, 200, "bhsd"),
]


@pytest.mark.slow  # emulated launches
@pytest.mark.parametrize(("mask", "sq", "sk", "layout"), STAIR, ids=["-".join(map(str, c)) for c in STAIR])
def test_staircase_nonfinite_v_is_exact(lib: EmuLibrary, mask: str, sq: int, sk: int, layout: str) -> None:
    """docs/numerics.md §1b: NaN and +-Inf in V at keys on the diagonal that some rows of a q-block see
    and others do not reach exactly the rows that see them (NaN/Inf positions and bits of the fp64
    reference over the visible keys), and every element whose reference is finite keeps the bits of
    the same call with those V elements finite (parts/stair.h: the safe key loop zeroes them in LDS
    and folds them back per visible key)."""
    g = torch.Generator().manual_seed(sq + 3 * sk)
    q, k, v = (realistic((1, s, 2, 128), g, x) for s, x in ((sq, "q"), (sk, "k"), (sk, "v")))
    bad = v.clone()
    plant_nonfinite(bad, sk)
    if layout == "bhsd":
        q, k, v, bad = (t.transpose(1, 2).contiguous() for t in (q, k, v, bad))
    clean = lib.forward(q, k, v, layout=layout, mask=mask)  # type: ignore[arg-type]
    lse = torch.full((1, 2, sq), 12345.0)
    out = lib.forward(q, k, bad, layout=layout, mask=mask, out=poisoned(tuple(q.shape)), lse=lse)  # type: ignore[arg-type]
    ref = reference.reference_full(q, k, bad, layout=layout, mask=mask)  # type: ignore[arg-type]
    o_bits = reference.to_bhsd_bits(out, layout)  # type: ignore[arg-type]
    check_contract(o_bits, lse, ref, "rtna")
    assert_finite_bits_kept(o_bits, reference.to_bhsd_bits(clean, layout), ref, "rtna")  # type: ignore[arg-type]


@pytest.mark.slow  # emulated launches
@pytest.mark.parametrize("mask", ["causal_top_left", "causal_bottom_right"])
def test_staircase_nonfinite_v_is_exact_in_a_varlen_batch(lib: EmuLibrary, mask: str) -> None:
    """The same in a packed batch: each sequence's diagonal holds non-finite V, and the next
    sequence's rows (past a block's last visible key) hold them too."""
    lens = [(100, 70), (90, 130), (260, 300)]
    g = torch.Generator().manual_seed(29)
    cq = torch.tensor([0, *np.cumsum([a for a, _ in lens])], dtype=torch.int32)
    ck = torch.tensor([0, *np.cumsum([c for _, c in lens])], dtype=torch.int32)
    tq, tk = int(cq[-1]), int(ck[-1])
    q, k, v = (realistic((n, 2, 128), g, x) for n, x in ((tq, "q"), (tk, "k"), (tk, "v")))
    kw = {"mask": mask, "cu_seqlens_q": cq, "cu_seqlens_k": ck, "max_seqlen_q": 260, "max_seqlen_k": 300}
    clean = lib.forward(q, k, v, **kw)  # type: ignore[arg-type]
    bad = v.clone()
    for i, (_, sk) in enumerate(lens):
        plant_nonfinite(bad, sk, int(ck[i]))
    lse = torch.full((2, tq), 12345.0)
    out = lib.forward(q, k, bad, out=poisoned((tq, 2, 128)), lse=lse, **kw)  # type: ignore[arg-type]
    ref = reference.reference_varlen(q, k, bad, cq, ck, mask=mask)  # type: ignore[arg-type]
    o_bits = reference.tensor_bits(out)
    check_contract(o_bits, lse, ref, "rtna")
    assert_finite_bits_kept(o_bits, reference.tensor_bits(clean), ref, "rtna")
