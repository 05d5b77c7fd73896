"""kernel/common/gqa_rows.h's view of a grouped-query call as a dense call, proven on the CPU golden
model for every backend that runs it: where the view is taken, the CPU backend's output of the
original call equals, bit for bit, its output of the viewed dense call (heads_kv heads, seqlen_q x
group rows, built as strided torch views from the view's own fields over the same memory); and the
view is not taken where rows would differ (a causal mask that tells them apart, varlen, the LSE,
strides that are not rows). The view comes from the CPU library's ra_gqa_rows_view_c, the same
header the GPU planners include."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regress.facts.abi import RA_ABI_VERSION, RA_HEAD_DIM, Params, bhsd_strides
from regress.facts.results import MASK_CODE, ROUNDING_CODE
from regress.kernel import KernelLibrary, load_library
from regress.native.build import build_kernel
from regress.native.plan import shape_params

D = RA_HEAD_DIM
POISON = 0x7FC1  # a NaN no kernel writes (the canonical one is 0x7FFF): a row left unwritten shows


@pytest.fixture(scope="module")
def lib() -> KernelLibrary:
    built = load_library(build_kernel("cpu").path)
    assert isinstance(built, KernelLibrary)
    return built


def view_of(lib: KernelLibrary, p: Params) -> Params | None:
    """ra_gqa_rows_view_c: the viewed call, or None where the view is not taken (its *view untouched)."""
    fn = lib.raw.ra_gqa_rows_view_c
    fn.argtypes = [ctypes.POINTER(Params), ctypes.POINTER(Params)]
    fn.restype = ctypes.c_int
    out = Params()
    ctypes.memset(ctypes.byref(out), 0xAB, ctypes.sizeof(out))
    before = bytes(out)
    taken = fn(ctypes.byref(p), ctypes.byref(out))
    assert taken in (0, 1)
    if not taken:
        assert bytes(out) == before, "a view not taken must leave *view untouched"
        return None
    return out


def params_of(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, layout: str, mask: str, rounding: str
) -> Params:
    """The ra_attention_params the CPU backend's forward() passes for these tensors (loader._call)."""
    p = Params()
    p.abi_version = RA_ABI_VERSION
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    b, h, sq, _ = (q.shape[0], q.shape[2], q.shape[1], 0) if layout == "bshd" else q.shape
    hk, sk = (k.shape[2], k.shape[1]) if layout == "bshd" else (k.shape[1], k.shape[2])
    p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.head_dim = b, h, sq, sk, D
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        getattr(p, f"{name}_stride")[:] = bhsd_strides(t, layout)  # type: ignore[arg-type]
    p.scale, p.rounding, p.heads_kv, p.mask = 0.0, ROUNDING_CODE[rounding], hk, MASK_CODE[mask]
    return p


def as_view(
    t: torch.Tensor, batch: int, heads: int, seqlen: int, stride: ctypes.Array[ctypes.c_int64]
) -> torch.Tensor:
    """t's memory as a [B, H, S, D] (bhsd) tensor of the view's sizes and element strides."""
    return torch.as_strided(t, (batch, heads, seqlen, D), tuple(stride), t.storage_offset())


def poisoned(shape: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    t = torch.empty_strided(shape, stride, dtype=torch.bfloat16)
    t.view(torch.int16).fill_(POISON)
    return t


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


def inputs(
    b: int, h: int, hk: int, sq: int, sk: int, layout: str, pad: int, special: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q with `pad` spare elements after each row (so the head stride is not D), K and V contiguous;
    `special` > 0 plants an Inf (odd) or a NaN (even) in K or V at a drawn place."""
    g = torch.Generator().manual_seed(seed)
    q_shape = (b, sq, h, D + pad) if layout == "bshd" else (b, h, sq, D + pad)
    qd = torch.randn(q_shape, generator=g)
    q = qd.bfloat16()[..., :D]
    kv_shape = (b, sk, hk, D) if layout == "bshd" else (b, hk, sk, D)
    k = (torch.randn(kv_shape, generator=g) * 2.0).bfloat16()
    v = torch.randn(kv_shape, generator=g).bfloat16()
    if special:
        target = k if special % 3 else v
        flat = target.view(-1)
        flat[(special * 7919) % flat.numel()] = math.inf if special % 2 else math.nan
    return q, k, v


def check_equal_through_the_view(
    lib: KernelLibrary,
    b: int,
    hk: int,
    g: int,
    sq: int,
    sk: int,
    layout: str,
    mask: str,
    rounding: str,
    pad: int = 0,
    special: int = 0,
    seed: int = 0,
) -> Params:
    h = hk * g
    q, k, v = inputs(b, h, hk, sq, sk, layout, pad, special, seed)
    o1 = poisoned(tuple(q.shape), q.stride())
    lib.forward(q, k, v, layout=layout, rounding=rounding, out=o1, mask=mask)  # type: ignore[arg-type]
    vw = view_of(lib, params_of(q, k, v, o1, layout, mask, rounding))
    assert vw is not None, (b, hk, g, sq, sk, layout, mask)
    assert (vw.batch, vw.heads, vw.heads_kv, vw.seqlen_q, vw.seqlen_k) == (b, hk, hk, sq * g, sk)
    assert vw.mask == MASK_CODE["none"] and not vw.lse and not vw.cu_seqlens_q
    o2 = poisoned(tuple(q.shape), q.stride())
    lib.forward(
        as_view(q, b, hk, sq * g, vw.q_stride),
        as_view(k, b, hk, sk, vw.k_stride),
        as_view(v, b, hk, sk, vw.v_stride),
        layout="bhsd",
        rounding=rounding,  # type: ignore[arg-type]
        out=as_view(o2, b, hk, sq * g, vw.o_stride),
    )
    assert torch.equal(bits(o1), bits(o2)), "the viewed dense call wrote other bits than the GQA call"
    assert not torch.equal(bits(o1), torch.full_like(bits(o1), POISON))
    return vw


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    b=st.integers(1, 3),
    hk=st.integers(1, 4),
    g=st.integers(2, 8),
    sk=st.integers(1, 300),
    layout=st.sampled_from(["bshd", "bhsd"]),
    mask=st.sampled_from(["none", "causal_bottom_right"]),
    rounding=st.sampled_from(sorted(ROUNDING_CODE)),
    pad=st.sampled_from([0, 8]),
    special=st.integers(0, 6),
    seed=st.integers(0, 2**16),
)
def test_a_gqa_decode_equals_its_dense_view_bit_for_bit(
    lib: KernelLibrary,
    b: int,
    hk: int,
    g: int,
    sk: int,
    layout: str,
    mask: str,
    rounding: str,
    pad: int,
    special: int,
    seed: int,
) -> None:
    vw = check_equal_through_the_view(lib, b, hk, g, 1, sk, layout, mask, rounding, pad, special, seed)
    # decode: the group's query heads are its rows, one head stride (D + pad) apart in either layout
    assert vw.q_stride[2] == D + pad and vw.q_stride[1] == g * (D + pad)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    b=st.integers(1, 3),
    g=st.integers(2, 8),
    sq=st.integers(1, 40),
    sk=st.integers(1, 300),
    rounding=st.sampled_from(sorted(ROUNDING_CODE)),
    pad=st.sampled_from([0, 8]),
    special=st.integers(0, 6),
    seed=st.integers(0, 2**16),
)
def test_bshd_mqa_equals_its_dense_view_bit_for_bit(
    lib: KernelLibrary, b: int, g: int, sq: int, sk: int, rounding: str, pad: int, special: int, seed: int
) -> None:
    """MQA in BSHD: query row s of head r is row s g + r of the one dense head, for any seqlen_q."""
    vw = check_equal_through_the_view(lib, b, 1, g, sq, sk, "bshd", "none", rounding, pad, special, seed)
    assert vw.seqlen_q == sq * g and vw.q_stride[2] == D + pad


@pytest.mark.parametrize(
    ("shape", "kw", "why"),
    [
        ((1, 32, 1, 8192), dict(heads_kv=8, lse=True), "the dense kernels write no LSE"),
        ((4, 32, 64, 8192), dict(heads_kv=8, max_seqlen=(1, 4000)), "varlen lengths are in device memory"),
        ((1, 32, 1, 8192), dict(heads_kv=8, mask="causal_top_left"), "top-left: the row sees key 0 only"),
        ((1, 8, 4, 512), dict(heads_kv=1, mask="causal_bottom_right"), "bottom-right rows differ"),
        ((1, 32, 4, 512), dict(heads_kv=8), "BSHD GQA: a row's next row is not g heads on"),
        ((1, 32, 1, 8192), dict(heads_kv=32), "MHA is already dense"),
    ],
)
def test_the_view_is_not_taken_where_rows_differ(
    lib: KernelLibrary, shape: tuple[int, int, int, int], kw: dict[str, Any], why: str
) -> None:
    assert view_of(lib, shape_params(*shape, **kw)) is None, why


def test_bhsd_mqa_with_more_rows_and_invalid_calls_are_not_viewed(lib: KernelLibrary) -> None:
    # BHSD MQA: a row's next row is not g heads on, except in decode (one row)
    assert view_of(lib, shape_params(1, 8, 4, 512, heads_kv=1, layout="bhsd")) is None
    assert view_of(lib, shape_params(1, 8, 1, 512, heads_kv=1, layout="bhsd")) is not None
    bad = shape_params(1, 32, 1, 8192, heads_kv=8)
    bad.heads_kv = 5  # 32 % 5 != 0: refused by validation, so never viewed
    assert view_of(lib, bad) is None
    fn = lib.raw.ra_gqa_rows_view_c
    fn.argtypes = [ctypes.POINTER(Params), ctypes.POINTER(Params)]
    assert fn(None, ctypes.byref(Params())) == 0
