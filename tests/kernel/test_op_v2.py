"""torch.ops.regress.attention's is_causal / causal_alignment / enable_gqa and
torch.ops.regress.varlen_attention over the CPU golden model: opcheck, fake kernels, torch.compile
(fullgraph) with eager bits, the forward-only refusal, and SDPA's argument rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from regress.kernel import attention, attention_varlen, default_library
from regress.kernel.op import attention_op, varlen_attention_op


def bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().view(torch.int16).numpy()


def qkv(b: int, h: int, hk: int, sq: int, sk: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(s, generator=g).bfloat16() for s in ((b, sq, h, 128), (b, sk, hk, 128), (b, sk, hk, 128))
    )


def varlen_inputs(
    lens_q: list[int], lens_k: list[int], h: int, hk: int, seed: int
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    cq = torch.tensor([0, *np.cumsum(lens_q)], dtype=torch.int32)
    ck = torch.tensor([0, *np.cumsum(lens_k)], dtype=torch.int32)
    q = torch.randn(int(cq[-1]), h, 128, generator=g).bfloat16()
    k = torch.randn(int(ck[-1]), hk, 128, generator=g).bfloat16()
    v = torch.randn(int(ck[-1]), hk, 128, generator=g).bfloat16()
    return q, k, v, cq, ck


@pytest.mark.parametrize(
    ("is_causal", "align", "gqa"),
    [(True, "top_left", False), (True, "bottom_right", True), (False, "top_left", True)],
)
def test_opcheck_dense(is_causal: bool, align: str, gqa: bool) -> None:
    q, k, v = qkv(2, 4, 2 if gqa else 4, 19, 37, seed=1)
    torch.library.opcheck(attention_op, (q, k, v, "bshd", "rtne", None, is_causal, align, gqa))


def test_opcheck_varlen() -> None:
    q, k, v, cq, ck = varlen_inputs([3, 0, 20, 1], [5, 4, 20, 0], 4, 2, seed=2)
    torch.library.opcheck(varlen_attention_op, (q, k, v, cq, ck, 20, 20, 0.0, None, True, "rtz"))


def test_ops_are_the_golden_model_bit_for_bit() -> None:
    lib = default_library("cpu")
    q, k, v = qkv(1, 8, 2, 30, 50, seed=3)
    want = lib.forward(q, k, v, rounding="rtne", mask="causal_bottom_right")
    got = attention(
        q, k, v, rounding="rtne", is_causal=True, causal_alignment="bottom_right", enable_gqa=True
    )
    assert np.array_equal(bits(got), bits(want))
    q, k, v, cq, ck = varlen_inputs([7, 1, 33], [9, 40, 33], 8, 2, seed=4)
    lse = torch.empty(8, q.shape[0])
    want = lib.forward(q, k, v, mask="causal_bottom_right", cu_seqlens_q=cq, cu_seqlens_k=ck,
                       max_seqlen_q=33, max_seqlen_k=40, lse=lse)  # fmt: skip
    out, got_lse = attention_varlen(q, k, v, cq, ck, 33, 40, causal=True, return_lse=True)  # type: ignore[misc]
    assert np.array_equal(bits(out), bits(want)) and torch.equal(got_lse, lse)


def test_sdpa_argument_rules() -> None:
    q, k, v = qkv(1, 4, 2, 8, 8, seed=5)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        attention(q, k, v)
    with pytest.raises(ValueError, match="needs is_causal=True"):
        attention(q, q, q, causal_alignment="bottom_right")
    with pytest.raises(ValueError, match="causal_alignment 'diagonal'"):
        attention(q, q, q, is_causal=True, causal_alignment="diagonal")  # type: ignore[arg-type]
    q3, k3, v3 = qkv(1, 3, 2, 8, 8, seed=5)
    with pytest.raises(ValueError, match="not a multiple"):
        attention(q3, k3, v3, enable_gqa=True)
    with pytest.raises(ValueError, match="dense attention only"):
        attention(q, q, q, is_causal=True, use="baseline")
    vq, vk, vv, cq, ck = varlen_inputs([4, 4], [4, 4], 2, 2, seed=6)
    with pytest.raises(ValueError, match=r"dropout_p=0\.1"):
        varlen_attention_op(vq, vk, vv, cq, ck, 4, 4, 0.1, None, False, "rtna")
    with pytest.raises(ValueError, match="cu_seqlens_q must be a 1-D int32"):
        attention_varlen(vq, vk, vv, cq.long(), ck, 4, 4)
    with pytest.raises(ValueError, match="max_seqlen_k=9"):
        attention_varlen(vq, vk, vv, cq, ck, 4, 9)
    from regress.kernel import KernelError

    with pytest.raises(KernelError, match="length 4 > max_seqlen_q 3"):
        attention_varlen(vq, vk, vv, cq, ck, 3, 4)


def test_fake_kernels_give_the_output_shapes() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(3, 1000, 32, 128, dtype=torch.bfloat16)
        k = torch.empty(3, 77, 8, 128, dtype=torch.bfloat16)
        o = attention_op(q, k, k, "bshd", "rtne", None, True, "top_left", True)
        vq = torch.empty(500, 32, 128, dtype=torch.bfloat16)
        vk = torch.empty(900, 8, 128, dtype=torch.bfloat16)
        cu = torch.empty(5, dtype=torch.int32)
        vo, lse = varlen_attention_op(vq, vk, vk, cu, cu, 200, 400, 0.0, None, True, "rtna")
    assert o.shape == (3, 1000, 32, 128) and vo.shape == (500, 32, 128)
    assert lse.shape == (32, 500) and lse.dtype == torch.float32


def test_backward_is_refused_for_both_ops() -> None:
    q, k, v = qkv(1, 2, 1, 8, 8, seed=7)
    out = attention_op(q.clone().requires_grad_(), k, v, "bshd", "rtne", None, True, "top_left", True)
    with pytest.raises(RuntimeError, match="regress::attention has no backward"):
        out.sum().backward()
    vq, vk, vv, cq, ck = varlen_inputs([4, 5], [6, 5], 2, 1, seed=8)
    out, _ = varlen_attention_op(vq.requires_grad_(), vk, vv, cq, ck, 5, 6, 0.0, None, True, "rtna")
    with pytest.raises(RuntimeError, match="regress::varlen_attention has no backward"):
        out.sum().backward()
    with pytest.raises(ValueError, match="forward-only"):
        attention_varlen(vq, vk, vv, cq, ck, 5, 6)


class _CausalGqaBlock(torch.nn.Module):
    """A Llama-style layer in miniature: Q with 4 heads, K/V with 2, causal, then the output projection."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(9)
        self.q = torch.nn.Linear(256, 4 * 128, dtype=torch.bfloat16)
        self.kv = torch.nn.Linear(256, 2 * 2 * 128, dtype=torch.bfloat16)
        self.out = torch.nn.Linear(4 * 128, 256, dtype=torch.bfloat16)
        for p in self.parameters():
            p.data.copy_(torch.randn(p.shape, generator=g) * 0.05)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, 4, 128)
        k, v = self.kv(x).view(b, n, 2, 2, 128).unbind(2)
        o = attention(q, k, v, rounding="rtne", is_causal=True, enable_gqa=True)
        return self.out(o.reshape(b, n, -1))


def test_compiled_causal_gqa_block_and_varlen_have_no_graph_break() -> None:
    block = _CausalGqaBlock()
    x = torch.randn(2, 45, 256, generator=torch.Generator().manual_seed(10)).bfloat16()
    torch._dynamo.reset()
    with torch.no_grad():
        eager = block(x)
        compiled = torch.compile(block, fullgraph=True)(x)
    assert np.array_equal(bits(compiled), bits(eager))

    def packed_layer(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cq: torch.Tensor, ck: torch.Tensor
    ) -> torch.Tensor:
        out = attention_varlen(q * 1.0, k, v, cq, ck, 30, 30, causal=True)
        return out.float().sum(-1)  # type: ignore[union-attr]

    vq, vk, vv, cq, ck = varlen_inputs([30, 1, 0, 12], [30, 3, 2, 12], 4, 2, seed=11)
    with torch.no_grad():
        want = packed_layer(vq, vk, vv, cq, ck)
        got = torch.compile(packed_layer, fullgraph=True)(vq, vk, vv, cq, ck)
    assert torch.equal(got, want)
