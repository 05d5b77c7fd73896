"""The CPU golden model against the exact fp64 reference: scaled ULP within the contract, NaN/Inf bit
for bit, layouts, strides, determinism, refusals, and the fire-drill builds."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from regress.facts import numerics as nm
from regress.facts.abi import PARAMS_PACK, RA_ABI_VERSION, Params
from regress.kernel import KernelError, KernelLibrary, load_library, reference
from regress.native.build import build_kernel

MODES = ("rtne", "rtna", "rtz")
# The contract's thresholds (regress/facts/contract.toml, docs/numerics.md).
LIMIT = {"rtne": 1.5, "rtna": 1.5, "rtz": 2.0}


@pytest.fixture(scope="module")
def lib() -> KernelLibrary:
    return load_library(build_kernel("cpu").path)


def make_qkv(
    b: int, h: int, sq: int, sk: int, layout: str = "bshd", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Realistic inputs (ANCHORS.md): Q, V ~ N(0,1); K rows with log-normal norms (sigma 0.6)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, sq, 128, generator=g)
    k = torch.randn(b, h, sk, 128, generator=g)
    k = k / k.norm(dim=-1, keepdim=True) * torch.exp(0.6 * torch.randn(b, h, sk, 1, generator=g)) * 128**0.5
    v = torch.randn(b, h, sk, 128, generator=g)
    out = [t.bfloat16() for t in (q, k, v)]
    if layout == "bshd":
        out = [t.transpose(1, 2).contiguous() for t in out]
    return out[0], out[1], out[2]


def bits(t: torch.Tensor) -> np.ndarray:
    return reference.tensor_bits(t)


def check(
    lib: KernelLibrary, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, mode: str,
    scale: float | None = None,
) -> dict[str, object]:  # fmt: skip
    """Runs the kernel and asserts the contract against the fp64 reference; returns the measures."""
    ref, mag = reference.reference_attention(q, k, v, layout=layout, scale=scale)  # type: ignore[arg-type]
    o_bits = reference.to_bhsd_bits(lib.forward(q, k, v, layout=layout, rounding=mode, scale=scale), layout)  # type: ignore[arg-type]
    ref_bits = nm.reference_bits(ref, mode)  # type: ignore[arg-type]
    nonfinite = nm.is_nonfinite_bits(ref_bits) | nm.is_nonfinite_bits(o_bits)
    # Non-finite outputs: the same positions and the same bits as the reference (NaN = 0x7FFF).
    assert np.array_equal(o_bits[nonfinite], ref_bits[nonfinite]), "non-finite pattern differs"
    su = nm.scaled_ulp(o_bits, ref, mag)
    fin = ~nonfinite
    dist = nm.ulp_distance(o_bits[fin], ref_bits[fin])
    res = {
        "max_scaled_ulp": float(su.max()),
        "p9999_scaled_ulp": float(np.quantile(su[fin], 0.9999)) if fin.any() else 0.0,
        "max_plain_ulp": int(dist.max()) if dist.size else 0,
        "hist": nm.ulp_histogram(dist),
        "nonfinite": int(nonfinite.sum()),
    }
    assert res["max_scaled_ulp"] <= LIMIT[mode], res
    return res


# Named shape suites: (B, H, Sq, Sk); ids are the names.
SHAPES = {
    "aiter-113x203": (2, 3, 113, 203),
    "square-256": (1, 4, 256, 256),
    "cross-1024x77": (1, 2, 1024, 77),
    "blocks-65x257": (1, 1, 65, 257),  # crosses the 64-row and 256-key blocks by one
    "odd-7x13": (3, 1, 7, 13),
    "sk1": (2, 2, 33, 1),
    "sq1": (2, 2, 1, 300),
    "one-by-one": (1, 1, 1, 1),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_random_inputs_within_contract(
    lib: KernelLibrary, shape: tuple[int, int, int, int], mode: str, record_property: object
) -> None:
    res = check(lib, *make_qkv(*shape, layout="bshd", seed=sum(shape)), "bshd", mode)
    record_property("measures", res)  # type: ignore[operator]
    print(f"{shape} {mode}: {res}")
    assert res["nonfinite"] == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("qmul", "kmul", "vmul"),
    [(16.0, 16.0, 1.0), (64.0, 64.0, 1.0), (1e-3, 1.0, 1.0), (1.0, 1.0, 1e30), (1.0, 1.0, 1e-30)],
    ids=["logits-x256", "logits-x4096-onehot", "logits-tiny-uniform", "v-huge", "v-tiny"],
)
def test_extreme_values(lib: KernelLibrary, mode: str, qmul: float, kmul: float, vmul: float) -> None:
    q, k, v = make_qkv(1, 2, 70, 90, seed=3)
    q, k, v = (q.float() * qmul).bfloat16(), (k.float() * kmul).bfloat16(), (v.float() * vmul).bfloat16()
    res = check(lib, q, k, v, "bshd", mode)
    assert res["nonfinite"] == 0


def _poisoned(kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v = make_qkv(1, 2, 40, 50, seed=9)
    nan, inf = float("nan"), float("inf")
    if kind == "nan-q":
        q[0, 3, 1, 7] = nan
    elif kind == "nan-k":
        k[0, 11, 0, 100] = nan
    elif kind == "nan-v":
        v[0, 5, 1, 64] = nan
    elif kind == "inf-q":
        q[0, 2, 0, 0] = inf
    elif kind == "neg-inf-q":
        q[0, 2, 0, 0] = -inf
    elif kind == "inf-k":
        k[0, 4, 1, 9] = inf
    elif kind == "inf-v":
        v[0, 8, 0, 3] = inf
        v[0, 9, 0, 4] = -inf
    elif kind == "inf-and-neg-inf-v":
        v[0, 8, 0, 3] = inf
        v[0, 9, 0, 3] = -inf
    elif kind == "all-neg-inf-row":
        # Every score of query row 6 is -inf: +inf in Q against K with negative entries there.
        q[0, 6, 0, 0] = inf
        k[0, :, 0, 0] = -1.0
    elif kind == "some-neg-inf-scores":
        # Row 6 sees -inf for half the keys and finite scores elsewhere: those keys get weight 0.
        q[0, 6, 0, 0] = inf
        k[0, :, 0, 0] = 0.0
        k[0, ::2, 0, 0] = -1.0
    return q, k, v


NONFINITE = [
    "nan-q", "nan-k", "nan-v", "inf-q", "neg-inf-q", "inf-k", "inf-v", "inf-and-neg-inf-v",
    "all-neg-inf-row", "some-neg-inf-scores",
]  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", NONFINITE)
def test_nan_inf_bit_identical_to_reference(lib: KernelLibrary, kind: str, mode: str) -> None:
    q, k, v = _poisoned(kind)
    res = check(lib, q, k, v, "bshd", mode)
    if kind != "some-neg-inf-scores":
        assert res["nonfinite"] > 0, "the poisoned input should reach the output"


def test_all_neg_inf_row_is_nan(lib: KernelLibrary) -> None:
    q, k, v = _poisoned("all-neg-inf-row")
    o = bits(lib.forward(q, k, v, layout="bshd", rounding="rtne"))
    assert np.all(o[0, 6, 0] == 0x7FFF)
    assert not nm.is_nonfinite_bits(o[0, 5]).any()


@pytest.mark.parametrize("mode", MODES)
def test_bshd_equals_bhsd_bit_for_bit(lib: KernelLibrary, mode: str) -> None:
    q, k, v = make_qkv(2, 3, 97, 131, layout="bhsd", seed=4)
    o_bhsd = lib.forward(q, k, v, layout="bhsd", rounding=mode)
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    o_bshd = lib.forward(qs, ks, vs, layout="bshd", rounding=mode)
    assert o_bshd.shape == qs.shape and o_bhsd.shape == q.shape
    assert np.array_equal(bits(o_bshd.transpose(1, 2)), bits(o_bhsd))


def test_strided_views_read_in_place(lib: KernelLibrary) -> None:
    """Q, K, V as slices of one fused QKV tensor (non-contiguous strides) give the same bits."""
    q, k, v = make_qkv(2, 2, 50, 50, seed=5)
    fused = torch.stack([q, k, v], dim=3)  # [B, S, H, 3, D]
    qv, kv, vv = fused[:, :, :, 0], fused[:, :, :, 1], fused[:, :, :, 2]
    assert not qv.is_contiguous()
    a = lib.forward(qv, kv, vv, layout="bshd", rounding="rtna")
    b = lib.forward(q, k, v, layout="bshd", rounding="rtna")
    assert np.array_equal(bits(a), bits(b))
    out = torch.empty(2, 2, 50, 128, dtype=torch.bfloat16).transpose(1, 2)  # a bshd view of bhsd memory
    c = lib.forward(q, k, v, layout="bshd", rounding="rtna", out=out)
    assert c.data_ptr() == out.data_ptr() and np.array_equal(bits(c), bits(b))


def test_scale_argument(lib: KernelLibrary) -> None:
    q, k, v = make_qkv(1, 2, 30, 40, seed=6)
    for mode in MODES:
        check(lib, q, k, v, "bshd", mode, scale=0.3)
    default = lib.forward(q, k, v, rounding="rtne")
    explicit = lib.forward(q, k, v, rounding="rtne", scale=128**-0.5)
    assert np.array_equal(bits(default), bits(explicit))


@pytest.fixture
def threads_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch


def test_deterministic_over_calls_and_thread_counts(
    lib: KernelLibrary, threads_env: pytest.MonkeyPatch
) -> None:
    q, k, v = make_qkv(2, 3, 200, 300, seed=8)
    first = bits(lib.forward(q, k, v, rounding="rtna"))
    for _ in range(4):
        assert np.array_equal(bits(lib.forward(q, k, v, rounding="rtna")), first)
    for n in ("1", "2", "3", "7", "16"):
        threads_env.setenv("REGRESS_CPU_THREADS", n)
        assert lib.build_info()["threads"] == int(n)
        assert np.array_equal(bits(lib.forward(q, k, v, rounding="rtna")), first), f"threads={n}"


@pytest.mark.slow  # two builds (1.6 s CPU)
def test_sse2_and_avx2_paths_agree(lib: KernelLibrary) -> None:
    """The build without function clones (baseline x86-64 vectors) gives the same bits."""
    plain = load_library(build_kernel("cpu", extra_flags=["-DRA_CPU_NO_CLONES"]).path)
    q, k, v = make_qkv(1, 2, 90, 333, seed=12)
    for mode in MODES:
        a = lib.forward(q, k, v, rounding=mode)
        b = plain.forward(q, k, v, rounding=mode)
        assert np.array_equal(bits(a), bits(b)), mode


# --- refusals -------------------------------------------------------------------------------------


def test_refuses_wrong_head_dim(lib: KernelLibrary) -> None:
    q = torch.zeros(1, 4, 1, 64, dtype=torch.bfloat16)
    with pytest.raises(KernelError, match="head_dim 64 is not supported") as e:
        lib.forward(q, q, q)
    assert e.value.code == 2


def test_refuses_float32(lib: KernelLibrary) -> None:
    q = torch.zeros(1, 4, 1, 128)
    with pytest.raises(TypeError, match="q has dtype float32, the kernel takes bfloat16"):
        lib.forward(q, q.bfloat16(), q.bfloat16())


def test_refuses_shape_mismatch(lib: KernelLibrary) -> None:
    q, k, v = make_qkv(1, 3, 8, 8)
    with pytest.raises(ValueError, match="disagree"):  # 2 K/V heads do not divide 3 (1 would: GQA)
        lib.forward(q, k[:, :, :2], v[:, :, :2])
    with pytest.raises(ValueError, match="differ in shape"):
        lib.forward(q, k, v[:, :4])
    with pytest.raises(ValueError, match="scale"):
        lib.forward(q, k, v, scale=-1.0)


def test_refuses_misaligned_pointer(lib: KernelLibrary) -> None:
    big = torch.zeros(1, 4, 1, 136, dtype=torch.bfloat16)
    q = big[..., 1:129]  # 2 bytes off a 16-byte boundary
    k = torch.zeros(1, 4, 1, 128, dtype=torch.bfloat16)
    with pytest.raises(KernelError, match="q is not 16-byte aligned") as e:
        lib.forward(q, k, k)
    assert e.value.code == 6


def test_refuses_bad_strides(lib: KernelLibrary) -> None:
    k = torch.zeros(1, 4, 2, 128, dtype=torch.bfloat16)
    q = torch.zeros(1, 4, 2, 256, dtype=torch.bfloat16)[..., ::2]
    with pytest.raises(KernelError, match="q dim stride is 2") as e:
        lib.forward(q, k, k)
    assert e.value.code == 4
    q = torch.zeros(1, 4, 2, 132, dtype=torch.bfloat16)[..., :128]  # 264-byte rows
    with pytest.raises(KernelError, match="not a multiple of 8"):
        lib.forward(q, k, k)


def _raw_params(q: torch.Tensor, o: torch.Tensor) -> Params:
    p = Params()
    p.abi_version = RA_ABI_VERSION
    p.heads_kv = 1
    p.q = p.k = p.v = q.data_ptr()
    p.o = o.data_ptr()
    p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.head_dim = 1, 1, 1, 1, 128
    for name in ("q_stride", "k_stride", "v_stride", "o_stride"):
        getattr(p, name)[:] = [128, 128, 128, 1]
    return p


def test_raw_abi_refusals(lib: KernelLibrary) -> None:
    q = torch.zeros(1, 1, 1, 128, dtype=torch.bfloat16)
    o = torch.empty_like(q)
    err = ctypes.create_string_buffer(256)
    fwd = lib.raw.ra_attention_fwd

    p = _raw_params(q, o)
    assert fwd(ctypes.byref(p), err, 256) == 0 and err.value == b""

    p = _raw_params(q, o)
    p.k = None
    assert fwd(ctypes.byref(p), err, 256) == 1 and err.value == b"k is a null pointer"

    p = _raw_params(q, o)
    p.v_stride[1] = -128
    assert fwd(ctypes.byref(p), err, 256) == 4 and b"negative" in err.value

    p = _raw_params(q, o)
    p.abi_version = 1  # a v1 caller: refused, naming both versions
    assert fwd(ctypes.byref(p), err, 256) == 8
    assert err.value.startswith(b"abi_version 1, this library implements 2")

    p = _raw_params(q, o)
    p.rounding = 3
    assert fwd(ctypes.byref(p), err, 256) == 5

    p = _raw_params(q, o)
    p.seqlen_k = 0
    assert fwd(ctypes.byref(p), err, 256) == 3
    assert fwd(None, err, 256) == 1


# (B, H, Sq, Sk) past 32-bit indexing: B = H = 2^32 multiplied to 2^64, which wrapped to 0 and
# passed (the CUDA host then divided by zero); B = 2^31 alone passed and became INT_MIN.
TOO_LARGE = [
    (1 << 32, 1 << 32, 1, 1),
    (1 << 31, 1, 1, 1),
    (1, 1 << 31, 1, 1),
    (1 << 16, 1 << 15, 1, 1),
    (1, 1, 1 << 31, 1),
    (1, 1, 1, 1 << 31),
    ((1 << 63) - 1, 2, 1, 1),
]


@pytest.mark.parametrize("dims", TOO_LARGE)
def test_validate_refuses_sizes_past_int_indexing(lib: KernelLibrary, dims: tuple[int, ...]) -> None:
    # ra_validate reads no tensor memory, so a one-row tensor stands for any size
    q = torch.zeros(1, 1, 1, 128, dtype=torch.bfloat16)
    o = torch.empty_like(q)
    err = ctypes.create_string_buffer(256)
    p = _raw_params(q, o)
    p.batch, p.heads, p.seqlen_q, p.seqlen_k = dims
    assert lib.raw.ra_validate(ctypes.byref(p), err, 256) == 3
    assert b"too large" in err.value and f"B={dims[0]} H={dims[1]}".encode() in err.value


def test_validate_takes_the_largest_sizes_that_fit(lib: KernelLibrary) -> None:
    q = torch.zeros(1, 1, 1, 128, dtype=torch.bfloat16)
    o = torch.empty_like(q)
    err = ctypes.create_string_buffer(256)
    for dims in (((1 << 31) - 1, 1, (1 << 31) - 1, (1 << 31) - 1), (1 << 16, (1 << 15) - 1, 1, 1)):
        p = _raw_params(q, o)
        p.batch, p.heads, p.seqlen_q, p.seqlen_k = dims
        assert lib.raw.ra_validate(ctypes.byref(p), err, 256) == 0, err.value


def test_build_info(lib: KernelLibrary) -> None:
    info = lib.build_info()
    assert info["backend"] == "cpu" and info["abi"] == RA_ABI_VERSION and info["threads"] >= 1
    assert info["inject"] == {
        "slowdown_pct": 0,
        "ulp": 0,
        "nondeterminism": 0,
        "hang_sq": 0,
        "crash_sq": 0,
        "round_swap": 0,
    }
    assert lib.backend == "cpu"


# --- fire-drill builds ----------------------------------------------------------------------------


@pytest.mark.slow  # a drill build (1.8 s CPU)
def test_inject_ulp_moves_outputs_away_from_zero(lib: KernelLibrary) -> None:
    drill = load_library(build_kernel("cpu", inject={"ulp": 2}).path)
    assert drill.build_info()["inject"]["ulp"] == 2
    q, k, v = make_qkv(1, 2, 40, 60, seed=10)
    clean = bits(lib.forward(q, k, v, rounding="rtne"))
    moved = bits(drill.forward(q, k, v, rounding="rtne"))
    nz = (clean & 0x7FFF) != 0
    assert np.all((moved[nz] & 0x7FFF).astype(int) - (clean[nz] & 0x7FFF).astype(int) == 2)
    assert np.all((moved[nz] & 0x8000) == (clean[nz] & 0x8000))
    assert np.array_equal(moved[~nz], clean[~nz])


@pytest.mark.slow  # a drill build (1.6 s CPU)
def test_inject_nondeterminism_flips_odd_launches(lib: KernelLibrary) -> None:
    drill = load_library(build_kernel("cpu", inject={"nondeterminism": 1}).path)
    q, k, v = make_qkv(1, 1, 10, 10, seed=11)
    clean = bits(lib.forward(q, k, v, rounding="rtne"))
    runs = [bits(drill.forward(q, k, v, rounding="rtne")) for _ in range(4)]
    assert np.array_equal(runs[0], runs[2]) and np.array_equal(runs[1], runs[3])
    assert not np.array_equal(runs[0], runs[1])
    good, bad = (runs[0], runs[1]) if np.array_equal(runs[0], clean) else (runs[1], runs[0])
    assert np.array_equal(good, clean)
    diff = np.flatnonzero(bad.ravel() != clean.ravel())
    assert diff.tolist() == [0] and bad.ravel()[0] ^ clean.ravel()[0] == 1


@pytest.mark.slow  # a drill build (1.7 s CPU)
def test_inject_slowdown_is_exact(lib: KernelLibrary, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slowdown drill changes only time, never bits. (That it is slower is shown by the fire-drill
    gate test, through the statistics a real nightly uses, not by a timing assertion here.)"""
    monkeypatch.setenv("REGRESS_CPU_THREADS", "1")
    drill = load_library(build_kernel("cpu", inject={"slowdown_pct": 300}).path)
    assert drill.build_info()["inject"]["slowdown_pct"] == 300
    args = make_qkv(1, 2, 128, 512, seed=13)
    assert np.array_equal(
        bits(drill.forward(*args, rounding="rtne")), bits(lib.forward(*args, rounding="rtne"))
    )


# --- public API and baselines ---------------------------------------------------------------------


def test_attention_api_and_backout_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    from regress.kernel import attention
    from regress.kernel.baselines import available_baselines

    q, k, v = make_qkv(1, 2, 48, 64, seed=14)
    ours = attention(q, k, v, layout="bshd", rounding="rtne")
    assert ours.shape == q.shape
    (sdpa,) = available_baselines("cpu")
    assert sdpa.name == "sdpa_cpu" and sdpa.supports("rtne") and not sdpa.supports("rtz")
    base = sdpa(q, k, v, layout="bshd", rounding="rtne")
    assert base.shape == q.shape
    assert np.array_equal(bits(attention(q, k, v, rounding="rtne", use="baseline")), bits(base))
    monkeypatch.setenv("REGRESS_ATTENTION", "baseline")
    assert np.array_equal(bits(attention(q, k, v, rounding="rtne")), bits(base))
    assert np.array_equal(bits(attention(q, k, v, rounding="rtne", use="kernel")), bits(ours))
    with pytest.warns(UserWarning, match="rounds with rtne"):
        attention(q, k, v, rounding="rtz")


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_sdpa_cpu_baseline_is_close_to_reference(layout: str) -> None:
    from regress.kernel.baselines import available_baselines

    (sdpa,) = available_baselines("cpu")
    q, k, v = make_qkv(1, 2, 70, 90, layout=layout, seed=15)
    ref, mag = reference.reference_attention(q, k, v, layout=layout)  # type: ignore[arg-type]
    o = sdpa(q, k, v, layout=layout, rounding="rtne")  # type: ignore[arg-type]
    assert o.shape == q.shape
    su = nm.scaled_ulp(reference.to_bhsd_bits(o, layout), ref, mag)  # type: ignore[arg-type]
    # Torch's CPU SDPA is not held to our contract; it only has to be a sane baseline.
    assert su.max() < 4.0, su.max()


def test_packed_parameter_block_is_the_c_struct() -> None:
    """forward() packs ra_attention_params with struct (one call) instead of filling the ctypes
    Structure field by field; every field must land where the C compiler puts it."""
    strides = list(range(100, 116))
    values = (
        2,
        11,
        12,
        13,
        14,
        2,
        3,
        5,
        7,
        128,
        *strides,
        0.5,
        2,
        0xDEAD,
        3,
        1,
        0,
        0x1000,
        0x2000,
        9,
        10,
        0x3000,
    )
    buf = (ctypes.c_uint64 * (PARAMS_PACK.size // 8))()
    PARAMS_PACK.pack_into(buf, 0, *values)
    p = Params.from_buffer(buf)
    assert PARAMS_PACK.size == ctypes.sizeof(Params)
    assert (p.abi_version, p.q, p.k, p.v, p.o) == (2, 11, 12, 13, 14)
    assert (p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.head_dim) == (2, 3, 5, 7, 128)
    assert [*p.q_stride, *p.k_stride, *p.v_stride, *p.o_stride] == strides
    assert (p.scale, p.rounding, p.stream) == (0.5, 2, 0xDEAD)
    assert (p.heads_kv, p.mask, p.reserved, p.cu_seqlens_q, p.cu_seqlens_k) == (3, 1, 0, 0x1000, 0x2000)
    assert (p.max_seqlen_q, p.max_seqlen_k, p.lse) == (9, 10, 0x3000)
