"""torch.ops.regress.attention: the custom op over the CPU golden model (regress/kernel/op.py).

The same op dispatches to the CUDA kernel on GPU tensors; benchmarks/h200/h200_op.py checks that side
(compile bits, CUDA-graph capture) on the H200.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from regress.kernel import attention, default_library
from regress.kernel.op import attention_op


def make_qkv(b: int, h: int, sq: int, sk: int, layout: str, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    shapes = ((b, sq, h, 128), (b, sk, h, 128), (b, sk, h, 128))
    ts = [torch.randn(s, generator=g).to(torch.bfloat16) for s in shapes]
    return tuple(t.transpose(1, 2) if layout == "bhsd" else t for t in ts)


def bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy()


@pytest.mark.parametrize(
    ("layout", "rounding", "scale"), [("bshd", "rtne", None), ("bhsd", "rtz", 0.3), ("bshd", "rtna", 0.05)]
)
def test_opcheck(layout: str, rounding: str, scale: float | None) -> None:
    """Schema, fake (meta) kernel against the real one, autograd registration and AOT dispatch."""
    q, k, v = make_qkv(2, 3, 19, 37, layout, seed=1)
    torch.library.opcheck(attention_op, (q, k, v, layout, rounding, scale))


def test_op_is_the_golden_model_bit_for_bit() -> None:
    q, k, v = make_qkv(1, 2, 40, 77, "bshd", seed=2)
    lib = default_library("cpu")
    for mode in ("rtne", "rtna", "rtz"):
        want = bits(lib.forward(q, k, v, layout="bshd", rounding=mode))  # type: ignore[arg-type]
        assert np.array_equal(bits(torch.ops.regress.attention(q, k, v, "bshd", mode, None)), want)
        assert np.array_equal(bits(attention(q, k, v, rounding=mode)), want)  # type: ignore[arg-type]


def test_fake_kernel_gives_the_output_shape_without_running() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(3, 5, 1000, 128, dtype=torch.bfloat16)  # bhsd
        k = torch.empty(3, 5, 77, 128, dtype=torch.bfloat16)
        o = attention_op(q, k, k, "bhsd", "rtne", None)
    assert o.shape == (3, 5, 1000, 128) and o.dtype == torch.bfloat16


def test_errors_still_name_the_problem() -> None:
    q, k, v = make_qkv(1, 1, 8, 8, "bshd", seed=3)
    with pytest.raises(TypeError, match="k has dtype float32"):
        attention(q, k.float(), v)
    with pytest.raises(ValueError, match="layout 'sbhd'"):
        attention(q, k, v, layout="sbhd")  # type: ignore[arg-type]


def test_forward_only_refuses_inputs_that_need_a_gradient() -> None:
    q, k, v = make_qkv(1, 1, 8, 8, "bshd", seed=7)
    with pytest.raises(ValueError, match="forward-only"):
        attention(q.requires_grad_(), k, v)
    with torch.no_grad():
        assert attention(q, k, v).shape == q.shape


def test_backward_through_the_op_raises() -> None:
    """Torch's fallback for an op without an autograd kernel only warns and returns no gradient."""
    q, k, v = make_qkv(1, 2, 8, 8, "bshd", seed=8)
    out = torch.ops.regress.attention(q.requires_grad_(), k, v, "bshd", "rtne", None)
    with torch.no_grad():  # the forward is the kernel's, bit for bit, whether or not grad is on
        assert np.array_equal(bits(out.detach()), bits(attention_op(q, k, v, "bshd", "rtne", None)))
    with pytest.raises(RuntimeError, match="regress::attention has no backward"):
        out.sum().backward()
    assert q.grad is None
    assert not attention_op(q.detach(), k, v, "bshd", "rtne", None).requires_grad


class _Block(torch.nn.Module):
    """A small attention layer: fused QKV projection, the op, output projection."""

    def __init__(self, heads: int, layout: str) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(4)
        width = heads * 128
        self.heads, self.layout = heads, layout
        self.qkv = torch.nn.Linear(width, 3 * width, dtype=torch.bfloat16)
        self.out = torch.nn.Linear(width, width, dtype=torch.bfloat16)
        for p in self.parameters():
            p.data.copy_(torch.randn(p.shape, generator=g) * 0.05)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, 128).unbind(2)
        if self.layout == "bhsd":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        o = attention(q, k, v, layout=self.layout, rounding="rtne")  # type: ignore[arg-type]
        if self.layout == "bhsd":
            o = o.transpose(1, 2)
        return self.out(o.reshape(b, n, -1))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_compiled_block_has_no_graph_break_and_eager_bits(layout: str) -> None:
    block = _Block(heads=2, layout=layout)
    x = torch.randn(2, 45, 256, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():  # the op is forward-only (no autograd formula)
        eager = block(x)
        compiled = torch.compile(block, fullgraph=True)(x)  # fullgraph: a graph break raises
    assert np.array_equal(bits(compiled), bits(eager))


def test_backout_switch_under_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """REGRESS_ATTENTION is read when torch.compile traces (a process sets it before it starts).
    The baseline path may break the graph (its one-time availability probe runs tensors)."""
    q, k, v = make_qkv(1, 2, 16, 24, "bshd", seed=6)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return attention(q, k, v, rounding="rtne")

    ours = bits(default_library("cpu").forward(q, k, v, rounding="rtne"))
    for env, want_ours in (("", True), ("baseline", False)):
        monkeypatch.setenv("REGRESS_ATTENTION", env)
        torch._dynamo.reset()
        got = bits(torch.compile(fn, fullgraph=want_ours, backend="eager")(q, k, v))
        assert np.array_equal(got, bits(attention(q, k, v, rounding="rtne")))
        assert np.array_equal(got, ours) == want_ours  # SDPA's fp32 path differs from the model
