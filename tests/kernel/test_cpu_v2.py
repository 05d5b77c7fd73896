"""The CPU golden model's ABI v2 features against the exact fp64 reference: causal masks (top-left and
bottom-right), grouped-query heads, variable-length batches and the log-sum-exp. The contract holds
for every case (scaled ULP <= 1.5 / 1.5 / 2.0, NaN/Inf positions and bits), rows with no visible key
are +0 with LSE -inf, and the exact relations between the features hold bit for bit: varlen is the
per-sequence dense call, GQA is MHA over repeated K/V heads, a masked key is never read. SDPA on
the CPU is an independent check of the mask and GQA semantics."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from staircase import assert_finite_bits_kept, plant_nonfinite

from regress.facts import numerics as nm
from regress.facts.results import MASKS
from regress.kernel import KernelLibrary, load_library, reference
from regress.native.build import build_kernel

LIMIT = {"rtne": 1.5, "rtna": 1.5, "rtz": 2.0}
# LSE: fp32 scores and an fp32 sum against fp64; |error| within this many fp32 ulps of max(|lse|, 1)
# (measured ~1e-6 absolute on the realistic inputs, where |lse| ~ 1-10).
LSE_ULPS = 64


@pytest.fixture(scope="module")
def lib() -> KernelLibrary:
    return load_library(build_kernel("cpu").path)  # type: ignore[return-value]


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
    return t.bfloat16()


def dense_qkv(b: int, h: int, hk: int, sq: int, sk: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (
        realistic((b, sq, h, 128), g, "q"),
        realistic((b, sk, hk, 128), g, "k"),
        realistic((b, sk, hk, 128), g, "v"),
    )


def packed(lens_q: list[int], lens_k: list[int], h: int, hk: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    cq = torch.tensor([0, *np.cumsum(lens_q)], dtype=torch.int32)
    ck = torch.tensor([0, *np.cumsum(lens_k)], dtype=torch.int32)
    tq, tk = int(cq[-1]), int(ck[-1])
    return (
        realistic((tq, h, 128), g, "q"),
        realistic((tk, hk, 128), g, "k"),
        realistic((tk, hk, 128), g, "v"),
        cq,
        ck,
    )


def assert_contract(o_bits: np.ndarray, lse: torch.Tensor, ref: reference.Reference, mode: str) -> float:
    """The contract for one output against its reference; returns the max scaled ULP."""
    ref_bits = nm.reference_bits(ref.ref, mode)  # type: ignore[arg-type]
    nonfinite = nm.is_nonfinite_bits(ref_bits) | nm.is_nonfinite_bits(o_bits)
    assert np.array_equal(o_bits[nonfinite], ref_bits[nonfinite]), "non-finite pattern differs"
    su = float(nm.scaled_ulp(o_bits, ref.ref, ref.mag).max()) if o_bits.size else 0.0
    assert su <= LIMIT[mode], su
    got = lse.numpy().astype(np.float64)
    assert np.array_equal(np.isneginf(got), np.isneginf(ref.lse)), "-inf LSE rows differ"
    assert np.array_equal(np.isnan(got), np.isnan(ref.lse)), "NaN LSE rows differ"
    fin = np.isfinite(ref.lse)
    tol = LSE_ULPS * np.spacing(np.maximum(np.abs(ref.lse[fin]), 1.0).astype(np.float32)).astype(np.float64)
    assert (np.abs(got[fin] - ref.lse[fin]) <= tol).all(), np.abs(got[fin] - ref.lse[fin]).max()
    return su


def no_key_rows_are_zero(o_bits: np.ndarray, n: np.ndarray) -> None:
    """o_bits [..., rows, D] with n visible keys per row: n == 0 rows are +0 bits."""
    assert (o_bits[..., n == 0, :] == 0).all()


MODES = ("rtne", "rtna", "rtz")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize(
    ("b", "h", "hk", "sq", "sk"),
    [(2, 4, 2, 70, 130), (1, 8, 1, 130, 70), (1, 2, 2, 65, 257), (1, 4, 4, 1, 300), (2, 4, 1, 33, 1)],
    ids=["gqa2-70x130", "mqa-130x70", "mha-65x257", "decode-1x300", "sk1"],
)
def test_dense_masks_and_gqa_within_contract(
    lib: KernelLibrary, b: int, h: int, hk: int, sq: int, sk: int, mask: str, mode: str
) -> None:
    q, k, v = dense_qkv(b, h, hk, sq, sk, seed=b + h + sq + sk)
    lse = torch.empty(b, h, sq)
    o = lib.forward(q, k, v, rounding=mode, mask=mask, lse=lse)  # type: ignore[arg-type]
    ref = reference.reference_full(q, k, v, layout="bshd", mask=mask)  # type: ignore[arg-type]
    o_bits = reference.to_bhsd_bits(o, "bshd")
    assert_contract(o_bits, lse, ref, mode)
    no_key_rows_are_zero(o_bits, reference.visible_keys(mask, sq, sk))  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Lengths 0 and 1 on both sides, every pairing, whatever hypothesis draws besides.
@example(
    lens=[(0, 0), (1, 0), (0, 1), (1, 1), (1, 5), (5, 1), (3, 0)],
    group=(4, 2),
    mask="causal_bottom_right",
    mode="rtne",
    seed=1,
)
@example(lens=[(0, 3), (1, 1), (64, 65), (65, 64)], group=(3, 1), mask="causal_top_left", mode="rtz", seed=2)
@given(
    lens=st.lists(st.tuples(st.integers(0, 90), st.integers(0, 90)), min_size=1, max_size=5),
    group=st.sampled_from([(2, 2), (4, 2), (4, 1), (3, 1)]),
    mask=st.sampled_from(MASKS),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 2**16),
)
def test_varlen_within_contract_and_equal_to_per_sequence_calls(
    lib: KernelLibrary, lens: list[tuple[int, int]], group: tuple[int, int], mask: str, mode: str, seed: int
) -> None:
    lens_q, lens_k = [a for a, _ in lens], [c for _, c in lens]
    if sum(lens_q) == 0 or sum(lens_k) == 0:
        lens_q[0], lens_k[-1] = lens_q[0] + 1, lens_k[-1] + 1  # the packed totals must be >= 1
    h, hk = group
    q, k, v, cq, ck = packed(lens_q, lens_k, h, hk, seed)
    lse = torch.empty(h, q.shape[0])
    o = lib.forward(
        q, k, v, rounding=mode, mask=mask, cu_seqlens_q=cq, cu_seqlens_k=ck,  # type: ignore[arg-type]
        max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k), lse=lse,
    )  # fmt: skip
    ref = reference.reference_varlen(q, k, v, cq, ck, mask=mask)  # type: ignore[arg-type]
    assert_contract(reference.tensor_bits(o), lse, ref, mode)
    # Bit for bit the dense call of each sequence (where both lengths are >= 1), LSE included.
    for i in range(len(lens_q)):
        q0, q1, k0, k1 = int(cq[i]), int(cq[i + 1]), int(ck[i]), int(ck[i + 1])
        if q1 == q0:
            continue
        if k1 == k0:
            assert (reference.tensor_bits(o[q0:q1]) == 0).all() and bool(torch.isneginf(lse[:, q0:q1]).all())
            continue
        dl = torch.empty(1, h, q1 - q0)
        d = lib.forward(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], rounding=mode, mask=mask, lse=dl)  # type: ignore[arg-type]
        assert np.array_equal(reference.tensor_bits(d[0]), reference.tensor_bits(o[q0:q1]))
        assert np.array_equal(dl[0].numpy().view(np.uint32), lse[:, q0:q1].numpy().view(np.uint32))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sq=st.integers(1, 80),
    sk=st.integers(1, 80),
    group=st.sampled_from([(2, 1), (4, 2), (6, 3), (3, 3)]),
    mask=st.sampled_from(MASKS),
    layout=st.sampled_from(["bshd", "bhsd"]),
    seed=st.integers(0, 2**16),
)
def test_gqa_is_mha_over_repeated_heads_bit_for_bit(
    lib: KernelLibrary, sq: int, sk: int, group: tuple[int, int], mask: str, layout: str, seed: int
) -> None:
    h, hk = group
    q, k, v = dense_qkv(1, h, hk, sq, sk, seed)
    rep = [t.repeat_interleave(h // hk, dim=2) for t in (k, v)]  # SDPA's enable_gqa expansion
    if layout == "bhsd":
        q, k, v, *rep = (t.transpose(1, 2) for t in (q, k, v, *rep))
    got = lib.forward(q, k, v, layout=layout, mask=mask)  # type: ignore[arg-type]
    want = lib.forward(q, rep[0], rep[1], layout=layout, mask=mask)  # type: ignore[arg-type]
    assert np.array_equal(reference.tensor_bits(got), reference.tensor_bits(want))


def test_square_causal_alignments_agree_and_top_left_equals_prefix_calls(lib: KernelLibrary) -> None:
    q, k, v = dense_qkv(1, 2, 2, 70, 70, seed=5)
    tl = lib.forward(q, k, v, mask="causal_top_left")
    br = lib.forward(q, k, v, mask="causal_bottom_right")
    assert np.array_equal(reference.tensor_bits(tl), reference.tensor_bits(br))
    for i in (0, 1, 63, 64, 69):  # row i of a causal call is the dense call of row i over keys 0..i
        d = lib.forward(q[:, i : i + 1], k[:, : i + 1], v[:, : i + 1])
        assert np.array_equal(reference.tensor_bits(d), reference.tensor_bits(tl[:, i : i + 1]))


@pytest.mark.parametrize("mask", ["causal_top_left", "causal_bottom_right"])
def test_a_masked_key_is_never_read(lib: KernelLibrary, mask: str) -> None:
    q, k, v = dense_qkv(1, 2, 1, 40, 60, seed=6)
    base = lib.forward(q, k, v, mask=mask)
    n = reference.visible_keys(mask, 40, 60)  # type: ignore[arg-type]
    k2, v2 = k.clone(), v.clone()
    k2[:, int(n.max()) :] = float("nan")
    v2[:, int(n.max()) :] = float("inf")
    assert np.array_equal(
        reference.tensor_bits(lib.forward(q, k2, v2, mask=mask)), reference.tensor_bits(base)
    )
    ref = reference.reference_full(q, k2, v2, layout="bshd", mask=mask)  # type: ignore[arg-type]
    assert np.isfinite(ref.ref).all()  # the reference does not read them either


@pytest.mark.parametrize(
    ("mask", "sq", "sk"),
    [("causal_top_left", 300, 300), ("causal_bottom_right", 100, 300), ("causal_bottom_right", 290, 200)],
)
def test_staircase_nonfinite_v_is_exact(lib: KernelLibrary, mask: str, sq: int, sk: int) -> None:
    """docs/numerics.md §1b, the rule every GPU kernel's staircase tests compare with: NaN and +-Inf in
    V at keys on the diagonal reach exactly the rows that see them (the fp64 reference's NaN/Inf
    positions and bits), and every element whose reference is finite keeps the bits of the same call
    with those V elements finite."""
    q, k, v = dense_qkv(1, 4, 2, sq, sk, seed=sq + 3 * sk)
    bad = v.clone()
    plant_nonfinite(bad, sk)
    lse = torch.empty(1, 4, sq)
    out = lib.forward(q, k, bad, rounding="rtna", mask=mask, lse=lse)  # type: ignore[arg-type]
    clean = reference.to_bhsd_bits(lib.forward(q, k, v, rounding="rtna", mask=mask), "bshd")  # type: ignore[arg-type]
    ref = reference.reference_full(q, k, bad, layout="bshd", mask=mask)  # type: ignore[arg-type]
    o_bits = reference.to_bhsd_bits(out, "bshd")
    assert_contract(o_bits, lse, ref, "rtna")
    assert_finite_bits_kept(o_bits, clean, ref, "rtna")


@pytest.mark.parametrize("kind", ["nan-q", "inf-k", "inf-v"])
@pytest.mark.parametrize("mask", MASKS)
def test_nan_inf_positions_with_masks_and_gqa(lib: KernelLibrary, kind: str, mask: str) -> None:
    q, k, v = dense_qkv(1, 4, 2, 40, 50, seed=9)
    if kind == "nan-q":
        q[0, 3, 1, 7] = float("nan")
    elif kind == "inf-k":
        k[0, 2, 0, 0] = float("inf")
    else:
        v[0, 5, 1, 64] = float("-inf")
    lse = torch.empty(1, 4, 40)
    o = lib.forward(q, k, v, rounding="rtne", mask=mask, lse=lse)  # type: ignore[arg-type]
    ref = reference.reference_full(q, k, v, layout="bshd", mask=mask)  # type: ignore[arg-type]
    assert_contract(reference.to_bhsd_bits(o, "bshd"), lse, ref, "rtne")


@pytest.fixture
def threads_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch


def test_deterministic_over_calls_and_thread_counts(
    lib: KernelLibrary, threads_env: pytest.MonkeyPatch
) -> None:
    q, k, v, cq, ck = packed([1, 0, 200, 7, 65], [300, 5, 200, 1, 0], 4, 2, seed=11)
    seen = set()
    for threads in ("1", "2", "3", "7"):
        threads_env.setenv("REGRESS_CPU_THREADS", threads)
        for _ in range(2):
            lse = torch.empty(4, q.shape[0])
            o = lib.forward(q, k, v, mask="causal_bottom_right", cu_seqlens_q=cq, cu_seqlens_k=ck,
                            max_seqlen_q=200, max_seqlen_k=300, lse=lse)  # fmt: skip
            seen.add(reference.tensor_bits(o).tobytes() + lse.numpy().tobytes())
    assert len(seen) == 1


@pytest.mark.parametrize("mask", MASKS)
def test_sdpa_on_cpu_agrees(lib: KernelLibrary, mask: str) -> None:
    """SDPA (fp32 math on the bf16 inputs) as an independent statement of the mask and GQA rules."""
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = dense_qkv(2, 8, 2, 50, 90, seed=12)  # Sq < Sk: the two alignments differ
    qf, kf, vf = (t.transpose(1, 2).float() for t in (q, k, v))
    if mask == "causal_bottom_right":
        want = torch.nn.functional.scaled_dot_product_attention(
            qf, kf.repeat_interleave(4, 1), vf.repeat_interleave(4, 1), attn_mask=causal_lower_right(50, 90)
        )
    else:
        want = torch.nn.functional.scaled_dot_product_attention(
            qf, kf, vf, is_causal=mask != "none", enable_gqa=True
        )
    got = lib.forward(q, k, v, mask=mask).transpose(1, 2).float()  # type: ignore[arg-type]
    # bf16 output against fp32 SDPA: one bf16 rounding of |o| <= ~4 plus fp32 noise.
    assert (got - want).abs().max().item() <= 2.0**-7 * max(1.0, want.abs().max().item())


def test_bottom_right_rows_without_keys(lib: KernelLibrary) -> None:
    q, k, v = dense_qkv(1, 2, 2, 40, 10, seed=13)  # Sq > Sk: rows 0..29 see no key
    lse = torch.empty(1, 2, 40)
    o = lib.forward(q, k, v, mask="causal_bottom_right", lse=lse)
    bits = reference.to_bhsd_bits(o, "bshd")
    assert (bits[:, :, :30] == 0).all() and (bits[:, :, 30:] != 0).any()
    assert bool(torch.isneginf(lse[..., :30]).all()) and bool(torch.isfinite(lse[..., 30:]).all())
