"""The sm_90a kernels' ABI v2 features on a real GPU (issue 40): causal masks in both alignments,
grouped-query heads (packed and not), variable-length batches and the LSE, against the exact fp64
reference (the contract: scaled ULP <= 1.5 / 1.5 / 2.0, NaN/Inf positions and bits, +0 and LSE -inf
where a row sees no key) and against themselves bit for bit (varlen is each sequence's call, GQA is
MHA over repeated K/V heads, the two alignments agree when Sq = Sk, every launch the same). Output
and LSE buffers start poisoned, so a row the kernel never writes shows (compute-sanitizer's
initcheck cannot see TMA stores), and a varlen output sits between guard rows that must survive.
Skipped, with the reason, where there is no GPU."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from staircase import assert_finite_bits_kept, finite_in_reference, plant_nonfinite

from regress.facts import numerics as nm
from regress.facts.results import MASKS
from regress.kernel import KernelLibrary, load_library, reference
from regress.native.build import build_kernel
from regress.native.plan import plan_launch

pytestmark = pytest.mark.gpu

LIMIT = {"rtne": 1.5, "rtna": 1.5, "rtz": 2.0}
LSE_ULPS = 64  # tests/kernel/test_cpu_v2.py's LSE tolerance: fp32 ulps of max(|lse|, 1)
POISON = 0x7FA1  # a NaN no kernel writes (the canonical NaN is 0x7FFF)
GUARD = 0x1234  # rows around a varlen output that no sequence owns


def _need_cuda_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm GPU: torch.cuda.is_available() is False")
    if torch.version.hip:
        pytest.skip("a HIP GPU: these are the CUDA backend's v2 kernels")


@pytest.fixture(scope="module")
def lib() -> KernelLibrary:
    _need_cuda_gpu()
    return load_library(build_kernel("cuda").path)  # type: ignore[return-value]


# the value under test: 1 (the default), or a candidate design the device harness names
# (h200_issue40_close.sh stair)
STAIR_EXACT = int(os.environ.get("REGRESS_STAIR_EXACT", "1"))
STAIR_FLAGS = (f"-DRA_CUDA_STAIR_EXACT={STAIR_EXACT}",)


@pytest.fixture(scope="module")
def stair_lib() -> KernelLibrary:
    """The library with kernel/cuda/stair.cuh built in (the default build since 2026-12-06)."""
    _need_cuda_gpu()
    out = load_library(build_kernel("cuda", extra_flags=STAIR_FLAGS).path)
    assert out.build_info()["stair_exact"] == STAIR_EXACT != 0
    return out  # type: ignore[return-value]


@pytest.fixture(scope="module")
def gap_lib() -> KernelLibrary:
    """The library built without it (-DRA_CUDA_STAIR_EXACT=0: the gap of docs/numerics.md §1b)."""
    _need_cuda_gpu()
    out = load_library(build_kernel("cuda", extra_flags=("-DRA_CUDA_STAIR_EXACT=0",)).path)
    assert out.build_info()["stair_exact"] == 0
    return out  # type: ignore[return-value]


def realistic(shape: tuple[int, ...], g: torch.Generator, kind: str) -> torch.Tensor:
    """ANCHORS.md's realistic inputs: Q, V ~ N(0,1); K rows with log-normal norms (sigma 0.6)."""
    t = torch.randn(shape, generator=g)
    if kind == "k":
        t = (
            t
            / t.norm(dim=-1, keepdim=True)
            * torch.exp(0.6 * torch.randn((*shape[:-1], 1), generator=g))
            * 128**0.5
        )
    return t.bfloat16().cuda()


def poisoned(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.full(shape, POISON, dtype=torch.int16, device="cuda").view(torch.bfloat16)


def lse_poisoned(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.full(shape, 12345.0, dtype=torch.float32, device="cuda")


def bits(t: torch.Tensor) -> np.ndarray:
    return reference.tensor_bits(t.cpu())


def check_contract(o_bits: np.ndarray, lse: torch.Tensor, ref: reference.Reference, mode: str) -> float:
    """The contract for one output (o_bits in the reference's layout) and its LSE; the max scaled ULP."""
    assert not (o_bits == POISON).any(), "an output element was never written"
    ref_bits = nm.reference_bits(ref.ref, mode)  # type: ignore[arg-type]
    nonfinite = nm.is_nonfinite_bits(ref_bits) | nm.is_nonfinite_bits(o_bits)
    assert np.array_equal(nm.canonicalize_nan(o_bits[nonfinite]), nm.canonicalize_nan(ref_bits[nonfinite])), (
        f"{int(nonfinite.sum())} non-finite positions or bits differ"
    )
    finite = ~nonfinite
    su = float(nm.scaled_ulp(o_bits, ref.ref, ref.mag)[finite].max()) if finite.any() else 0.0
    assert su <= LIMIT[mode], su
    got = lse.cpu().numpy().astype(np.float64)
    assert not (got == 12345.0).any(), "an LSE entry was never written"
    assert np.array_equal(np.isneginf(got), np.isneginf(ref.lse)), "-inf LSE rows differ"
    assert np.array_equal(np.isnan(got), np.isnan(ref.lse)), "NaN LSE rows differ"
    fin = np.isfinite(ref.lse)
    tol = LSE_ULPS * np.spacing(np.maximum(np.abs(ref.lse[fin]), 1.0).astype(np.float32)).astype(np.float64)
    assert (np.abs(got[fin] - ref.lse[fin]) <= tol).all(), np.abs(got[fin] - ref.lse[fin]).max()
    return su


def dense_case(
    lib: KernelLibrary,
    b: int,
    h: int,
    hk: int,
    sq: int,
    sk: int,
    mask: str,
    mode: str,
    layout: str,
    seed: int,
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = realistic((b, sq, h, 128), g, "q")
    k = realistic((b, sk, hk, 128), g, "k")
    v = realistic((b, sk, hk, 128), g, "v")
    if layout == "bhsd":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out = poisoned(tuple(q.shape))
    lse = lse_poisoned((b, h, sq))
    lib.forward(q, k, v, layout=layout, rounding=mode, mask=mask, out=out, lse=lse)  # type: ignore[arg-type]
    torch.cuda.synchronize()
    return q, k, v, out, lse


MODES = ("rtne", "rtna", "rtz")
DENSE = [
    # b, h, hk, sq, sk: GQA 4 and 8, MQA, MHA; Sq < Sk, > Sk (bottom-right rows with no key), equal;
    # partial tiles and key blocks; decode and short queries (packed GQA)
    (2, 8, 2, 300, 500),
    (1, 8, 1, 500, 300),
    (1, 4, 4, 257, 257),
    (2, 32, 8, 1, 1000),
    (2, 32, 8, 16, 700),
    (1, 16, 2, 5, 129),
    (3, 6, 3, 200, 77),
    (1, 4, 2, 1024, 1024),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize(("b", "h", "hk", "sq", "sk"), DENSE, ids=[str(s) for s in DENSE])
def test_dense_v2_within_contract(
    lib: KernelLibrary, b: int, h: int, hk: int, sq: int, sk: int, mask: str, mode: str
) -> None:
    layout = "bhsd" if (sq + sk) % 2 else "bshd"
    q, k, v, out, lse = dense_case(lib, b, h, hk, sq, sk, mask, mode, layout, seed=sq * 7 + sk)
    ref = reference.reference_full(q, k, v, layout=layout, mask=mask)  # type: ignore[arg-type]
    o_bits = reference.to_bhsd_bits(out.cpu(), layout)  # type: ignore[arg-type]
    check_contract(o_bits, lse, ref, mode)
    n = reference.visible_keys(mask, sq, sk)  # type: ignore[arg-type]
    assert (o_bits[..., n == 0, :] == 0).all(), "a row with no visible key is not +0"


def varlen_case(
    lib: KernelLibrary, lens: list[tuple[int, int]], h: int, hk: int, mask: str, mode: str, seed: int
) -> tuple[torch.Tensor, ...]:
    """A packed call whose output sits between 3 guard rows on each side."""
    g = torch.Generator().manual_seed(seed)
    cq = torch.tensor([0, *np.cumsum([a for a, _ in lens])], dtype=torch.int32)
    ck = torch.tensor([0, *np.cumsum([c for _, c in lens])], dtype=torch.int32)
    tq, tk = int(cq[-1]), int(ck[-1])
    q = realistic((tq, h, 128), g, "q")
    k = realistic((tk, hk, 128), g, "k")
    v = realistic((tk, hk, 128), g, "v")
    big = torch.full((tq + 6, h, 128), GUARD, dtype=torch.int16, device="cuda").view(torch.bfloat16)
    big[3 : 3 + tq] = poisoned((tq, h, 128))
    lse = lse_poisoned((h, tq))
    mq, mk = max(a for a, _ in lens), max(c for _, c in lens)
    lib.forward(
        q, k, v, rounding=mode, mask=mask, cu_seqlens_q=cq.cuda(), cu_seqlens_k=ck.cuda(),  # type: ignore[arg-type]
        max_seqlen_q=mq, max_seqlen_k=mk, out=big[3 : 3 + tq], lse=lse,
    )  # fmt: skip
    torch.cuda.synchronize()
    guards = torch.cat([big[:3], big[3 + tq :]]).view(torch.int16)
    assert bool((guards == GUARD).all()), "a row outside the packed output was written"
    return q, k, v, cq, ck, big[3 : 3 + tq], lse


# lengths 0 and 1, a sequence past one query tile, keys past one key block, odd lengths; the last
# the "many short, a few long" shape at a size a test can afford
VARLEN = [
    [(1, 0), (0, 3), (1, 1), (130, 130), (17, 300), (0, 0), (300, 17), (64, 64)],
    [(200, 1), (1, 200), (129, 129), (5, 5)],
    [(37, 37), (91, 91), (12, 12), (400, 400), (3, 3), (150, 150), (1, 1), (256, 256)],
    [(1, 700), (1, 90), (1, 1), (1, 128), (1, 129)],  # decode steps of a batch: packed GQA
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("lens", VARLEN, ids=[f"varlen{i}" for i in range(len(VARLEN))])
@pytest.mark.parametrize("group", [(8, 2), (4, 4)], ids=["gqa4", "mha"])
def test_varlen_within_contract_and_equal_to_per_sequence_calls(
    lib: KernelLibrary, lens: list[tuple[int, int]], group: tuple[int, int], mask: str, mode: str
) -> None:
    h, hk = group
    q, k, v, cq, ck, out, lse = varlen_case(lib, lens, h, hk, mask, mode, seed=len(lens) + h)
    ref = reference.reference_varlen(q, k, v, cq, ck, mask=mask)  # type: ignore[arg-type]
    check_contract(bits(out), lse, ref, mode)
    for i in range(len(lens)):  # bit for bit the dense call of each sequence (LSE included)
        q0, q1, k0, k1 = int(cq[i]), int(cq[i + 1]), int(ck[i]), int(ck[i + 1])
        if q1 == q0:
            continue
        if k1 == k0:
            assert (bits(out[q0:q1]) == 0).all() and bool(torch.isneginf(lse[:, q0:q1]).all())
            continue
        dl = torch.empty(1, h, q1 - q0, device="cuda")
        d = lib.forward(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], rounding=mode, mask=mask, lse=dl)  # type: ignore[arg-type]
        torch.cuda.synchronize()
        assert np.array_equal(bits(d[0]), bits(out[q0:q1])), f"sequence {i} differs from its own call"
        assert np.array_equal(
            dl[0].cpu().numpy().view(np.uint32), lse[:, q0:q1].cpu().numpy().view(np.uint32)
        )


@pytest.mark.parametrize(("sq", "sk"), [(1, 1000), (16, 700), (300, 500), (5, 129)])
@pytest.mark.parametrize("mask", MASKS)
def test_gqa_is_mha_over_repeated_heads_bit_for_bit(lib: KernelLibrary, sq: int, sk: int, mask: str) -> None:
    """Packed or not (short queries pack 4 heads into a tile), each query row of a v2 launch does the
    arithmetic of the MHA call over repeated K/V heads. A decode with no mask or a bottom-right one runs
    as its dense view instead (kernel/common/gqa_rows.h, the default since cc7b6ff): the dense kernels
    split its keys, and their fp32 merge order is not the unsplit v2 MHA call's, so there it is, bit
    for bit, the viewed dense call (row r of K/V head j is query head 4 j + r), and within the contract."""
    g = torch.Generator().manual_seed(sq + sk)
    q = realistic((2, sq, 16, 128), g, "q")
    k = realistic((2, sk, 4, 128), g, "k")
    v = realistic((2, sk, 4, 128), g, "v")
    got = lib.forward(q, k, v, mask=mask)  # type: ignore[arg-type]
    if plan_launch("cuda", 2, 16, sq, sk, heads_kv=4, mask=mask)["kind"].startswith("sm90_v2"):
        rep = [t.repeat_interleave(4, dim=2) for t in (k, v)]
        lse = torch.empty(2, 16, sq, device="cuda")  # the LSE makes the MHA call a v2 one too
        want = lib.forward(q, rep[0], rep[1], mask=mask, lse=lse)  # type: ignore[arg-type]
    else:
        assert sq == 1 and mask != "causal_top_left", "only a decode that no mask tells apart runs as rows"
        rows = q[:, 0].reshape(2, 4, 4, 128).transpose(1, 2).contiguous()
        want = lib.forward(rows, k, v).transpose(1, 2).reshape(2, 1, 16, 128)
        ref = reference.reference_full(q, k, v, layout="bshd", mask=mask)  # type: ignore[arg-type]
        o_bits = reference.to_bhsd_bits(got.cpu(), "bshd")
        assert float(nm.scaled_ulp(o_bits, ref.ref, ref.mag).max()) <= LIMIT["rtna"]  # forward's default
    torch.cuda.synchronize()
    assert np.array_equal(bits(got), bits(want))


def test_square_causal_alignments_agree_and_launches_repeat(lib: KernelLibrary) -> None:
    g = torch.Generator().manual_seed(3)
    q, k, v = (realistic((2, 1000, 8, 128), g, x) for x in "qkv")
    k2, v2 = k[:, :, :2].contiguous(), v[:, :, :2].contiguous()
    tl = lib.forward(q, k2, v2, mask="causal_top_left")
    br = lib.forward(q, k2, v2, mask="causal_bottom_right")
    torch.cuda.synchronize()
    assert np.array_equal(bits(tl), bits(br))
    other = torch.cuda.Stream()
    for i in range(6):  # bit-determinism, every other launch on a second stream beside unrelated work
        with torch.cuda.stream(other if i % 2 else torch.cuda.current_stream()):
            _ = torch.randn(4096, 4096, device="cuda") @ torch.randn(4096, 4096, device="cuda")
            again = lib.forward(q, k2, v2, mask="causal_top_left")
        torch.cuda.synchronize()
        assert np.array_equal(bits(again), bits(tl)), f"launch {i} differs"


@pytest.mark.parametrize(("sq", "sk"), [(100, 300), (50, 100), (130, 200)])
def test_keys_no_row_of_a_tile_sees_are_never_read(lib: KernelLibrary, sq: int, sk: int) -> None:
    """Top-left with Sq < Sk: keys >= Sq are seen by no row, yet the last key block loaded holds some
    (keys 100-127 of the first shape). NaN in their K and Inf in their V change nothing: the scores
    are masked and the unseen V rows zeroed before the P.V. (Keys some rows of a tile see and others
    do not: the staircase tests below.)"""
    g = torch.Generator().manual_seed(9)
    q, k, v = (
        realistic((1, sq, 2, 128), g, "q"),
        realistic((1, sk, 1, 128), g, "k"),
        realistic((1, sk, 1, 128), g, "v"),
    )
    base = lib.forward(q, k, v, mask="causal_top_left")
    k2, v2 = k.clone(), v.clone()
    k2[:, sq:] = float("nan")
    v2[:, sq:] = float("inf")
    got = lib.forward(q, k2, v2, mask="causal_top_left")
    torch.cuda.synchronize()
    assert np.array_equal(bits(got), bits(base))


@pytest.mark.parametrize("mask", ["none", "causal_bottom_right"])
def test_tiles_of_one_warpgroup_between_tiles_of_two(lib: KernelLibrary, mask: str) -> None:
    """Hundreds of one-block tiles: sequences of 40 rows (the second warpgroup has no row: it runs
    ahead into the next tile) between sequences of 100 (both warpgroups zero the last block's unseen
    V rows together). The two cases' barriers must never meet (device call 2: an illegal instruction
    when they shared one barrier with two thread counts). Each sequence equals its own call."""
    lens = [40, 100] * 300
    g = torch.Generator().manual_seed(7)
    cu = torch.tensor([0, *np.cumsum(lens)], dtype=torch.int32, device="cuda")
    n = int(cu[-1])
    q, k, v = realistic((n, 8, 128), g, "q"), realistic((n, 2, 128), g, "k"), realistic((n, 2, 128), g, "v")
    kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=100, max_seqlen_k=100)
    out = lib.forward(q, k, v, mask=mask, **kw)  # type: ignore[arg-type]
    again = lib.forward(q, k, v, mask=mask, **kw)  # type: ignore[arg-type]
    torch.cuda.synchronize()
    assert np.array_equal(bits(out), bits(again))
    for i in (0, 1, 299, 598, 599):
        a, b = int(cu[i]), int(cu[i + 1])
        d = lib.forward(q[None, a:b], k[None, a:b], v[None, a:b], mask=mask)  # type: ignore[arg-type]
        torch.cuda.synchronize()
        assert np.array_equal(bits(d[0]), bits(out[a:b])), i


def test_a_neighbour_sequence_never_reaches_another(lib: KernelLibrary) -> None:
    """Sequence 0's last key block holds sequence 1's first rows (TMA reads the packed tensor): NaN in
    sequence 1's K and Inf in its V leave sequence 0's outputs as they were."""
    g = torch.Generator().manual_seed(4)
    cq = torch.tensor([0, 70, 120], dtype=torch.int32, device="cuda")
    q, k, v = (
        realistic((120, 4, 128), g, "q"),
        realistic((120, 2, 128), g, "k"),
        realistic((120, 2, 128), g, "v"),
    )
    kw = dict(cu_seqlens_q=cq, cu_seqlens_k=cq, max_seqlen_q=70, max_seqlen_k=70)
    for mask in MASKS:
        base = lib.forward(q, k, v, mask=mask, **kw)  # type: ignore[arg-type]
        k2, v2 = k.clone(), v.clone()
        k2[70:] = float("nan")
        v2[70:] = float("inf")
        got = lib.forward(q, k2, v2, mask=mask, **kw)  # type: ignore[arg-type]
        torch.cuda.synchronize()
        assert np.array_equal(bits(got[:70]), bits(base[:70])), mask
        assert bool(torch.isnan(got[70:].float()).all()), "sequence 1 sees its own NaN keys"


@pytest.mark.parametrize("kind", ["nan_q", "nan_k", "nan_v", "posinf_k", "neginf_k", "posinf_v", "neginf_v"])
def test_non_finite_inputs_match_the_reference(lib: KernelLibrary, kind: str) -> None:
    """The suites' edge inputs (one poisoned element, batch 0 head 0 row 3) on a causal GQA call;
    the poisoned key is one every row sees, so the reference's NaN/Inf positions apply."""
    from regress.facts.cases import Shape
    from regress.run.suites.common import make_inputs

    shape = Shape(1, 4, 200, 300, hkv=2, mask="causal_bottom_right")
    q, k, v = make_inputs(shape, "bshd", seed=42, device="cuda", kind=kind)
    out, lse = poisoned(tuple(q.shape)), lse_poisoned((1, 4, 200))
    lib.forward(q, k, v, mask="causal_bottom_right", out=out, lse=lse)
    torch.cuda.synchronize()
    ref = reference.reference_full(q, k, v, layout="bshd", mask="causal_bottom_right")
    check_contract(reference.to_bhsd_bits(out.cpu(), "bshd"), lse, ref, "rtne")


def test_bad_cu_seqlens_write_nothing_and_do_not_fault(lib: KernelLibrary) -> None:
    """cu_seqlens live in device memory, so the pre-pass checks them: a list that decreases or does
    not end at the total lists no tile (the output keeps what it held), and the GPU stays usable."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (
        realistic((100, 4, 128), g, "q"),
        realistic((100, 2, 128), g, "k"),
        realistic((100, 2, 128), g, "v"),
    )
    for cu in ([0, 60, 40, 100], [0, 50, 100, 90], [1, 50, 100]):
        c = torch.tensor(cu, dtype=torch.int32, device="cuda")
        out = poisoned((100, 4, 128))
        lib.forward(q, k, v, cu_seqlens_q=c, cu_seqlens_k=c, max_seqlen_q=100, max_seqlen_k=100, out=out)
        torch.cuda.synchronize()
        assert bool((out.view(torch.int16) == POISON).all()), cu
    ok = torch.tensor([0, 50, 100], dtype=torch.int32, device="cuda")
    out = lib.forward(q, k, v, cu_seqlens_q=ok, cu_seqlens_k=ok, max_seqlen_q=50, max_seqlen_k=50)
    torch.cuda.synchronize()
    assert bool(torch.isfinite(out.float()).all())


def test_a_cuda_graph_replays_a_varlen_call(lib: KernelLibrary) -> None:
    """The pre-pass and the kernel are both captured: a replay with new lengths in the same buffer
    gives the eager call's bits for those lengths."""
    g = torch.Generator().manual_seed(6)
    q, k, v = (
        realistic((600, 8, 128), g, "q"),
        realistic((600, 2, 128), g, "k"),
        realistic((600, 2, 128), g, "v"),
    )
    cu = torch.tensor([0, 100, 350, 600], dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    kw = dict(
        cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=600, max_seqlen_k=600, mask="causal_bottom_right"
    )
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        lib.forward(q, k, v, out=out, **kw)  # type: ignore[arg-type]  # warm: workspace, attributes
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        lib.forward(q, k, v, out=out, **kw)  # type: ignore[arg-type]
    cu.copy_(torch.tensor([0, 1, 599, 600], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    want = lib.forward(q, k, v, **kw)  # type: ignore[arg-type]
    torch.cuda.synchronize()
    assert np.array_equal(bits(out), bits(want))


# mask, h, hk, sq, sk, layout: one and two query tiles on the diagonal (MHA, GQA 2), bottom-right with
# Sq < Sk (a staircase over two key blocks) and Sq > Sk (a tile of rows with no key, then one whose
# staircase starts in block 0); the last two: packed GQA tiles (4 heads of 32 rows), the planted keys
# 13, 14 (and 38, 39 bottom-right) on their staircase
STAIR = [
    ("causal_top_left", 2, 2, 300, 300, "bshd"),
    ("causal_top_left", 2, 1, 300, 300, "bhsd"),
    ("causal_bottom_right", 2, 2, 100, 300, "bshd"),
    ("causal_bottom_right", 2, 2, 290, 200, "bhsd"),
    ("causal_top_left", 8, 2, 32, 40, "bshd"),
    ("causal_bottom_right", 8, 2, 32, 40, "bshd"),
]


def stair_case(
    lib: KernelLibrary, mask: str, h: int, hk: int, sq: int, sk: int, layout: str
) -> tuple[np.ndarray, np.ndarray, torch.Tensor, reference.Reference]:
    """The call with non-finite V on the diagonal and the same call with V finite (BHSD bits), the
    first one's LSE and its fp64 reference."""
    g = torch.Generator().manual_seed(sq + 3 * sk + h)
    q, k, v = (
        realistic((1, sq, h, 128), g, "q"),
        realistic((1, sk, hk, 128), g, "k"),
        realistic((1, sk, hk, 128), g, "v"),
    )
    bad = v.clone()
    plant_nonfinite(bad, sk)
    if layout == "bhsd":
        q, k, v, bad = (t.transpose(1, 2).contiguous() for t in (q, k, v, bad))
    clean = lib.forward(q, k, v, layout=layout, rounding="rtna", mask=mask)  # type: ignore[arg-type]
    out, lse = poisoned(tuple(q.shape)), lse_poisoned((1, h, sq))
    lib.forward(q, k, bad, layout=layout, rounding="rtna", mask=mask, out=out, lse=lse)  # type: ignore[arg-type]
    torch.cuda.synchronize()
    ref = reference.reference_full(q, k, bad, layout=layout, mask=mask)  # type: ignore[arg-type]
    to_bits = reference.to_bhsd_bits
    return to_bits(out.cpu(), layout), to_bits(clean.cpu(), layout), lse, ref  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mask", "h", "hk", "sq", "sk", "layout"), STAIR, ids=["-".join(map(str, c)) for c in STAIR]
)
def test_staircase_nonfinite_v_is_exact(
    stair_lib: KernelLibrary, mask: str, h: int, hk: int, sq: int, sk: int, layout: str
) -> None:
    """docs/numerics.md §1b with RA_CUDA_STAIR_EXACT=1 (kernel/cuda/stair.cuh): NaN and +-Inf in V at
    keys on the diagonal that some rows of a tile see and others do not reach exactly the rows that
    see them (NaN/Inf positions and bits of the fp64 reference over the visible keys), and every
    element whose reference is finite keeps the bits of the same call with those V elements finite.
    The cases run the kernels they are meant for (the host planner's kind)."""
    kind = plan_launch("cuda", 1, h, sq, sk, heads_kv=hk, mask=mask, layout=layout)["kind"]
    assert kind == ("sm90_v2_packgqa_causal" if sq == 32 else "sm90_v2_causal"), kind
    o_bits, clean, lse, ref = stair_case(stair_lib, mask, h, hk, sq, sk, layout)
    check_contract(o_bits, lse, ref, "rtna")
    assert_finite_bits_kept(o_bits, clean, ref, "rtna")


@pytest.mark.parametrize("mask", ["causal_top_left", "causal_bottom_right"])
def test_staircase_nonfinite_v_is_exact_in_a_varlen_batch(stair_lib: KernelLibrary, mask: str) -> None:
    """The same in a packed GQA batch: each sequence's diagonal holds non-finite V, and the next
    sequence's rows (past a tile's last visible key) hold them too."""
    lens = [(100, 70), (90, 130), (260, 300)]
    q, k, v, cq, ck, clean, _ = varlen_case(stair_lib, lens, 4, 2, mask, "rtna", seed=29)
    bad = v.clone()
    for i, (_, sk) in enumerate(lens):
        plant_nonfinite(bad, sk, int(ck[i]))
    tq = int(cq[-1])
    out, lse = poisoned((tq, 4, 128)), lse_poisoned((4, tq))
    stair_lib.forward(
        q, k, bad, rounding="rtna", mask=mask, cu_seqlens_q=cq.cuda(), cu_seqlens_k=ck.cuda(),  # type: ignore[arg-type]
        max_seqlen_q=260, max_seqlen_k=300, out=out, lse=lse,
    )  # fmt: skip
    torch.cuda.synchronize()
    ref = reference.reference_varlen(q, k, bad, cq, ck, mask=mask)  # type: ignore[arg-type]
    o_bits = bits(out)
    check_contract(o_bits, lse, ref, "rtna")
    assert_finite_bits_kept(o_bits, bits(clean), ref, "rtna")


def test_staircase_gap_without_the_flag(gap_lib: KernelLibrary) -> None:
    """Built with RA_CUDA_STAIR_EXACT=0 the kernels have the gap docs/numerics.md §1b states, so the
    tests above can fail: a NaN on the diagonal reaches a row that does not see its key."""
    o_bits, _, _, ref = stair_case(gap_lib, "causal_top_left", 2, 2, 300, 300, "bshd")
    assert nm.is_nonfinite_bits(o_bits)[finite_in_reference(ref, "rtna")].any()
