"""The CUDA backend's mma.sync fallback past CUDA's grid.y limit, on a real GPU.

The fallback (taken where TMA refuses the tensors' strides, or in a -DRA_CUDA_FORCE_MMA_SYNC=1
build, which this test uses) puts batch x heads on grid.y, at most 65535. More of them run in
launches of whole batches; a launch with more than 65535 heads is refused with a shape error.
Skipped, with the reason, where there is no GPU.
"""

from __future__ import annotations

import pytest

from regress.facts import numerics as nm
from regress.facts.abi import KernelError
from regress.facts.cases import Shape
from regress.facts.metrics import load_contract
from regress.kernel import KernelLibrary, load_library, reference
from regress.native.build import build_kernel
from regress.run.suites.common import make_inputs

pytestmark = pytest.mark.gpu


@pytest.fixture
def fallback(gpu_device: str) -> KernelLibrary:
    import torch

    if torch.version.hip:
        pytest.skip("a HIP GPU: the mma.sync fallback is the CUDA backend's")
    return load_library(build_kernel("cuda", extra_flags=("-DRA_CUDA_FORCE_MMA_SYNC=1",)).path)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_batches_past_the_grid_limit_equal_one_batch_at_a_time(fallback: KernelLibrary, layout: str) -> None:
    import torch

    s = Shape(3, 30000, 3, 5)  # 90000 (batch, head) pairs: launches of 2 batches and of 1
    q, k, v = make_inputs(s, layout, seed=5, device="cuda")
    contract = load_contract()
    ref = reference.reference_attention(q, k, v, layout=layout)  # type: ignore[arg-type]
    for mode in ("rtne", "rtna", "rtz"):
        whole = fallback.forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
        for b in range(s.b):
            one = fallback.forward(q[b : b + 1], k[b : b + 1], v[b : b + 1], layout=layout, rounding=mode)  # type: ignore[arg-type]
            assert torch.equal(whole[b : b + 1].view(torch.int16), one.view(torch.int16)), (layout, mode, b)
        worst = float(nm.scaled_ulp(reference.to_bhsd_bits(whole, layout), *ref).max())  # type: ignore[arg-type]
        assert worst <= contract.scaled_ulp_limit(mode), (layout, mode, worst)


def test_more_heads_than_the_grid_limit_are_refused(fallback: KernelLibrary) -> None:
    q, k, v = make_inputs(Shape(1, 65536, 1, 1), "bhsd", seed=5, device="cuda")
    with pytest.raises(KernelError, match="65536 heads") as info:
        fallback.forward(q, k, v, layout="bhsd", rounding="rtne")  # type: ignore[arg-type]
    assert info.value.code == 3  # RA_ERR_SHAPE
