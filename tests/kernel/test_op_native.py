"""The C++ kernels of torch.ops.regress.* (kernel/torch/regress_op.cpp, issue 40) against the Python
kernels they replace (regress.kernel.op.python_ops(), the same ops in the `regress_python` namespace): the
same bits on every mode, layout, mask, GQA and varlen case, the same exception type and words for
every refusal (hostile arguments from hypothesis), the same forward-only autograd; the build through
regress.native.build's cache; and the fallback to the Python kernels, with its reason, where the C++
library cannot be built (a real compiler that fails, in a fresh process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regress.facts.abi import KernelError
from regress.facts.results import LAYOUTS, ROUNDING_MODES
from regress.kernel import attention, attention_varlen, default_library, op
from regress.native.build import build_kernel, build_op

ROOT = Path(__file__).resolve().parents[2]
PY_ATTENTION, PY_VARLEN = op.python_ops()


def bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().view(torch.int16).numpy()


def qkv(b: int, h: int, hk: int, sq: int, sk: int, layout: str, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    ts = [
        torch.randn(s, generator=g).bfloat16() for s in ((b, sq, h, 128), (b, sk, hk, 128), (b, sk, hk, 128))
    ]
    return tuple(t.transpose(1, 2) if layout == "bhsd" else t for t in ts)


def packed(lens_q: list[int], lens_k: list[int], h: int, hk: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    cq = torch.tensor([0, *np.cumsum(lens_q)], dtype=torch.int32)
    ck = torch.tensor([0, *np.cumsum(lens_k)], dtype=torch.int32)
    q = torch.randn(int(cq[-1]), h, 128, generator=g).bfloat16()
    k, v = (torch.randn(int(ck[-1]), hk, 128, generator=g).bfloat16() for _ in range(2))
    return q, k, v, cq, ck


def test_this_process_runs_the_cpp_kernels() -> None:
    """CI has a C++ compiler and torch's headers: anything else is a fallback these tests must see."""
    assert op.IMPLEMENTATION == "native", op.IMPLEMENTATION_REASON
    assert "libregress_op.so" in op.IMPLEMENTATION_REASON and torch.__version__ in op.IMPLEMENTATION_REASON


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("h", "hk", "sq", "sk", "is_causal", "align"),
    [
        (3, 3, 19, 37, False, "top_left"),
        (4, 2, 33, 20, True, "top_left"),
        (4, 1, 20, 33, True, "bottom_right"),  # MQA
        (8, 2, 1, 300, False, "top_left"),  # decode
        (2, 2, 70, 65, True, "bottom_right"),  # Sq > Sk: rows with no visible key give 0
    ],
)
def test_dense_bits_equal_the_python_kernels(
    layout: str, h: int, hk: int, sq: int, sk: int, is_causal: bool, align: str
) -> None:
    q, k, v = qkv(2, h, hk, sq, sk, layout, seed=h * 1000 + sq)
    lib = default_library("cpu")
    mask = op.dense_mask(is_causal, align)
    for mode in ROUNDING_MODES:
        for scale in (None, 0.07):
            args = (q, k, v, layout, mode, scale, is_causal, align, hk != h)
            native, python = op.attention_op(*args), PY_ATTENTION(*args)
            want = lib.forward(q, k, v, layout=layout, rounding=mode, scale=scale, mask=mask)  # type: ignore[arg-type]
            assert np.array_equal(bits(native), bits(python)), (mode, scale)
            assert np.array_equal(bits(native), bits(want)), (mode, scale)
            assert native.shape == q.shape and native.is_contiguous()


def test_strided_and_broadcast_inputs_give_the_same_bits() -> None:
    """Views the strides rule covers: a slice of a larger buffer, size-1 dims with odd strides, K/V
    expanded over the batch (stride 0)."""
    g = torch.Generator().manual_seed(3)
    big = torch.randn(2, 50, 6, 256, generator=g).bfloat16()
    q = big[:, 5:35, 1:4, 64:192]
    kv = torch.randn(1, 40, 3, 128, generator=g).bfloat16().expand(2, 40, 3, 128)
    one = torch.randn(1, 1, 1, 128, generator=g).bfloat16().as_strided((1, 1, 1, 128), (7, 3, 5, 1))
    for args in ((q, kv, kv, "bshd"), (one, kv[:1, :, :1], kv[:1, :, :1], "bshd")):
        full = (*args, "rtne", None, False, "top_left", args[0].shape[2] != args[1].shape[2])
        assert np.array_equal(bits(op.attention_op(*full)), bits(PY_ATTENTION(*full)))


@pytest.mark.parametrize(
    ("lens_q", "lens_k", "h", "hk", "causal"),
    [
        ([7, 1, 33], [9, 40, 33], 8, 2, True),
        ([3, 0, 20, 1], [5, 4, 20, 0], 4, 4, False),
        ([1, 1, 1], [300, 17, 1], 4, 1, True),  # decode-shaped
    ],
)
def test_varlen_bits_and_lse_equal_the_python_kernels(
    lens_q: list[int], lens_k: list[int], h: int, hk: int, causal: bool
) -> None:
    q, k, v, cq, ck = packed(lens_q, lens_k, h, hk, seed=sum(lens_q))
    for mode in ROUNDING_MODES:
        args = (q, k, v, cq, ck, max(lens_q), max(lens_k), 0.0, None, causal, mode)
        (o1, l1), (o2, l2) = op.varlen_attention_op(*args), PY_VARLEN(*args)
        assert np.array_equal(bits(o1), bits(o2)) and torch.equal(l1.view(torch.int32), l2.view(torch.int32))
        assert l1.shape == (h, q.shape[0]) and l1.dtype == torch.float32


def test_opcheck_both_ops_with_the_cpp_kernels() -> None:
    q, k, v = qkv(2, 4, 2, 19, 37, "bhsd", seed=1)
    torch.library.opcheck(op.attention_op, (q, k, v, "bhsd", "rtz", 0.2, True, "bottom_right", True))
    vq, vk, vv, cq, ck = packed([3, 0, 20, 1], [5, 4, 20, 0], 4, 2, seed=2)
    torch.library.opcheck(op.varlen_attention_op, (vq, vk, vv, cq, ck, 20, 20, 0.0, None, True, "rtna"))


def test_compiled_fullgraph_runs_the_cpp_kernels_with_eager_bits() -> None:
    def layer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # Exact arithmetic around the op (a float sum after it may be reordered by the compiler).
        return attention(q * 1.0, k, v, rounding="rtz", is_causal=True, enable_gqa=True) * 2.0

    q, k, v = qkv(1, 4, 2, 30, 30, "bshd", seed=4)
    torch._dynamo.reset()
    with torch.no_grad():
        assert np.array_equal(bits(torch.compile(layer, fullgraph=True)(q, k, v)), bits(layer(q, k, v)))


# ---- refusals: the same type and words as the Python kernels --------------------------------------


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, str]:
    """(exception type, message) of a call, or ("ok", "") — a refusal of the kernel library counts as
    KernelError on both sides (the C++ one is a RuntimeError that regress.kernel.op.kernel_error reads)."""
    try:
        fn(*args)
    except RuntimeError as exc:
        err = op.kernel_error(exc) or exc
        return type(err).__name__, str(err)
    except (TypeError, ValueError) as exc:
        return type(exc).__name__, str(exc)
    return "ok", ""


def same_outcome(native: Callable[..., Any], python: Callable[..., Any], *args: Any) -> tuple[str, str]:
    got, want = outcome(native, *args), outcome(python, *args)
    assert got == want
    return got


ASCII = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=12)
TENSORS: dict[str, Callable[[], torch.Tensor]] = {
    "q": lambda: torch.zeros(1, 4, 2, 128, dtype=torch.bfloat16),
    "gqa_k": lambda: torch.zeros(1, 4, 1, 128, dtype=torch.bfloat16),
    "three_heads": lambda: torch.zeros(1, 4, 3, 128, dtype=torch.bfloat16),
    "head_dim_64": lambda: torch.zeros(1, 4, 2, 64, dtype=torch.bfloat16),
    "short_k": lambda: torch.zeros(1, 5, 2, 128, dtype=torch.bfloat16),
    "batch_2": lambda: torch.zeros(2, 4, 2, 128, dtype=torch.bfloat16),
    "empty": lambda: torch.zeros(1, 0, 2, 128, dtype=torch.bfloat16),
    "3d": lambda: torch.zeros(4, 2, 128, dtype=torch.bfloat16),
    "5d": lambda: torch.zeros(1, 1, 4, 2, 128, dtype=torch.bfloat16),
    "unaligned": lambda: torch.zeros(1, 4, 2, 129, dtype=torch.bfloat16)[..., 1:],
    "float32": lambda: torch.zeros(1, 4, 2, 128),
    "float16": lambda: torch.zeros(1, 4, 2, 128, dtype=torch.float16),
    "int64": lambda: torch.zeros(1, 4, 2, 128, dtype=torch.int64),
    "bool": lambda: torch.zeros(1, 4, 2, 128, dtype=torch.bool),
    "complex64": lambda: torch.zeros(1, 4, 2, 128, dtype=torch.complex64),
    "uint16": lambda: torch.zeros(1, 4, 2, 128, dtype=torch.uint16),
}
SCALES = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1e16, 1e-5])
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tq=st.sampled_from(list(TENSORS)),
    tk=st.sampled_from(list(TENSORS)),
    tv=st.sampled_from(list(TENSORS)),
    layout=st.one_of(st.sampled_from(LAYOUTS), ASCII),
    rounding=st.one_of(st.sampled_from(ROUNDING_MODES), ASCII),
    scale=SCALES,
    is_causal=st.booleans(),
    align=st.one_of(st.sampled_from(["top_left", "bottom_right"]), ASCII),
    gqa=st.booleans(),
)
def test_dense_refusals_match(
    tq: str,
    tk: str,
    tv: str,
    layout: str,
    rounding: str,
    scale: float | None,
    is_causal: bool,
    align: str,
    gqa: bool,
) -> None:
    args = (TENSORS[tq](), TENSORS[tk](), TENSORS[tv](), layout, rounding, scale, is_causal, align, gqa)
    same_outcome(op.attention_op, PY_ATTENTION, *args)


def test_dense_refusals_name_the_argument() -> None:
    """A few of the cases above, with the words spelled out (so a test of equal messages cannot pass
    on two equally wrong ones)."""
    q, k = TENSORS["q"](), TENSORS["gqa_k"]()
    ok = (q, q, q, "bshd", "rtne", None, False, "top_left", False)
    cases = [
        ({0: TENSORS["float16"]()}, ("TypeError", "q has dtype float16, the kernel takes bfloat16")),
        ({2: TENSORS["complex64"]()}, ("TypeError", "v has dtype complex64, the kernel takes bfloat16")),
        ({1: k}, ("ValueError", "q has 2 heads and k 1: pass enable_gqa=True for grouped-query attention")),
        ({3: "b'hs\"d"}, ("ValueError", "layout 'b\\'hs\"d' is not 'bshd' or 'bhsd'")),
        ({4: "rtn"}, ("ValueError", "rounding 'rtn' is not one of rtne, rtna, rtz")),
        ({5: -1e16}, ("ValueError", "scale must be positive and finite, got -1e+16")),
        ({5: -0.0}, ("ValueError", "scale must be positive and finite, got -0.0")),
        ({5: -123456.0}, ("ValueError", "scale must be positive and finite, got -123456.0")),
        ({7: "bottom_right"}, ("ValueError", "causal_alignment='bottom_right' needs is_causal=True")),
        (
            {0: TENSORS["3d"]()},
            ("ValueError", "q must be 4-D ([B,S,H,D] or [B,H,S,D]), got shape (4, 2, 128)"),
        ),
        ({1: TENSORS["short_k"]()}, ("ValueError", "k (1, 5, 2, 128) and v (1, 4, 2, 128) differ in shape")),
        ({0: TENSORS["head_dim_64"]()}, ("ValueError", "disagree in batch or head_dim")),
        (
            {0: TENSORS["unaligned"]()},
            ("KernelError", "cpu kernel refused the call: q is not 16-byte aligned"),
        ),
        ({0: TENSORS["empty"]()}, ("KernelError", "every size must be >= 1")),
    ]
    for change, (kind, words) in cases:
        args = tuple(change.get(i, a) for i, a in enumerate(ok))
        got = same_outcome(op.attention_op, PY_ATTENTION, *args)
        assert got[0] == kind and words in got[1], (change, got)


@settings(max_examples=200, deadline=None)
@given(
    lens=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=4),
    cq_kind=st.sampled_from(["ok", "int64", "2d", "one", "longer"]),
    max_q=st.integers(-2, 30),
    max_k=st.integers(-2, 30),
    dropout=st.sampled_from([0.0, 0.1, -0.0, float("nan")]),
    scale=SCALES,
    rounding=st.one_of(st.sampled_from(ROUNDING_MODES), ASCII),
    k_heads=st.sampled_from([1, 2, 3]),
    q_dims=st.sampled_from([3, 4]),
)
def test_varlen_refusals_match(
    lens: list[tuple[int, int]],
    cq_kind: str,
    max_q: int,
    max_k: int,
    dropout: float,
    scale: float | None,
    rounding: str,
    k_heads: int,
    q_dims: int,
) -> None:
    q, k, v, cq, ck = packed([a for a, _ in lens], [b for _, b in lens], 2, k_heads, seed=5)
    cq = {
        "ok": cq,
        "int64": cq.long(),
        "2d": cq[None],
        "one": cq[:1],
        "longer": torch.cat([cq, cq[-1:]]),
    }[cq_kind]
    q = q[None] if q_dims == 4 else q
    same_outcome(
        op.varlen_attention_op, PY_VARLEN, q, k, v, cq, ck, max_q, max_k, dropout, scale, False, rounding
    )


def test_a_kernel_refusal_is_a_kernel_error_with_its_code() -> None:
    vq, vk, vv, cq, ck = packed([4, 4], [4, 4], 2, 2, seed=6)
    with pytest.raises(KernelError, match="length 4 > max_seqlen_q 3") as e:
        attention_varlen(vq, vk, vv, cq, ck, 3, 4)
    assert e.value.code == 11  # RA_ERR_SEQLENS
    q = TENSORS["head_dim_64"]()
    with pytest.raises(KernelError, match="head_dim 64 is not supported") as e2:
        attention(q, q, q)
    assert e2.value.code == 2  # RA_ERR_HEAD_DIM
    with pytest.raises(RuntimeError, match=r"\[ra_status 2\]$"):  # the op itself: torch's RuntimeError
        op.attention_op(q, q, q, "bshd", "rtne", None, False, "top_left", False)
    assert op.kernel_error(RuntimeError("something else [ra_status x]")) is None


def test_backward_refused_and_forward_unchanged_under_grad() -> None:
    q, k, v = qkv(1, 2, 1, 8, 8, "bshd", seed=7)
    qg = q.clone().requires_grad_()
    for fn in (op.attention_op, PY_ATTENTION):
        out = fn(qg, k, v, "bshd", "rtne", None, True, "top_left", True)
        assert out.requires_grad and out.grad_fn is not None
        assert np.array_equal(
            bits(out), bits(op.attention_op(q, k, v, "bshd", "rtne", None, True, "top_left", True))
        )
        with pytest.raises(RuntimeError, match=r"::attention has no backward: the kernel is forward-only"):
            out.float().sum().backward()
    vq, vk, vv, cq, ck = packed([4, 5], [6, 5], 2, 1, seed=8)
    out, lse = op.varlen_attention_op(vq, vk.requires_grad_(), vv, cq, ck, 5, 6, 0.0, None, True, "rtna")
    for t in (out, lse):
        with pytest.raises(RuntimeError, match="regress::varlen_attention has no backward"):
            t.float().sum().backward(retain_graph=True)
    with torch.no_grad():
        assert not op.attention_op(qg, k, v, "bshd", "rtne", None, True, "top_left", True).requires_grad
    with torch.inference_mode():
        assert op.attention_op(qg.detach(), k, v, "bshd", "rtne", None, True, "top_left", True).is_inference()


# ---- the build, and the fallback where it cannot be had --------------------------------------------


def test_the_operator_library_is_built_once_through_the_build_cache() -> None:
    first, art = build_op(), build_op()
    assert art.cached and art.path == first.path and art.path.name == "libregress_op.so"
    assert art.backend == "torch-op" and not art.compile_only
    assert f'-DRA_TORCH_VERSION="{torch.__version__}"' in art.flags
    assert art.path.parent.name.startswith("torch-op-")
    meta = json.loads((art.path.parent / "build.json").read_text())
    assert meta["source_hash"] == art.source_hash and meta["flags"] == art.flags


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_without_a_working_compiler_the_python_kernels_run_with_the_reason(tmp_path: Path) -> None:
    """A g++ on PATH that compiles the kernel but fails on the operator's source (a real failed
    build, in a fresh cache that holds only the CPU kernel): the op warns, says why, runs the Python
    kernels and gives the kernel's bits; REGRESS_OP=native refuses instead."""
    kernel = build_kernel("cpu")
    cache = tmp_path / "cache"
    shutil.copytree(kernel.path.parent, cache / kernel.path.parent.name)
    real = shutil.which("g++")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "g++").write_text(
        "#!/bin/sh\n"
        'case "$*" in *regress_op.cpp*) echo "regress_op.cpp:1: error: planted" >&2; exit 1;; esac\n'
        f'exec {real} "$@"\n'
    )
    (bin_dir / "g++").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "REGRESS_CACHE_DIR": str(cache),
        "PYTHONPATH": str(ROOT),
    }
    env.pop("REGRESS_OP", None)
    code = """
        import warnings, torch
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            from regress.kernel import op
        from regress.kernel import default_library
        q = torch.randn(1, 9, 2, 128, generator=torch.Generator().manual_seed(1)).bfloat16()
        got = op.attention_op(q, q, q, "bshd", "rtz", None, True, "top_left", False)
        want = default_library("cpu").forward(q, q, q, rounding="rtz", mask="causal_top_left")
        print(op.IMPLEMENTATION, torch.equal(got.view(torch.int16), want.view(torch.int16)))
        print("WARN", [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)])
    """
    res = _python(code, env)
    assert res.returncode == 0, res.stderr[-3000:]
    first, warned = res.stdout.splitlines()[:2]
    assert first == "python True"
    assert "the C++ operator could not be built" in warned and "planted" in warned
    refused = _python("import regress.kernel.op", {**env, "REGRESS_OP": "native"})
    assert refused.returncode != 0 and "NativeOpUnavailable" in refused.stderr and "planted" in refused.stderr
    chosen = _python(
        "from regress.kernel import op; print(op.IMPLEMENTATION, op.IMPLEMENTATION_REASON)",
        {**env, "REGRESS_OP": "python"},
    )
    assert chosen.stdout.strip() == "python REGRESS_OP=python", chosen.stderr[-2000:]
