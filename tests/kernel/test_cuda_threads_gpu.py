"""The CUDA backend's first calls made by several threads at once, on a real GPU.

The library fills its per-device facts (SM count, compute capability) on the first call and sets
each kernel's shared-memory attribute on that kernel's first launch; both once, under a lock and
atomic flags. This runs the first calls of a fresh process from eight threads released together
(ctypes drops the GIL for the call), each on its own stream, and asks for every output to equal
the one a single later call gives. Skipped, with the reason, where there is no GPU.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from regress.native.build import build_kernel

pytestmark = pytest.mark.gpu

_SCRIPT = textwrap.dedent(
    """
    import sys, threading, torch
    from regress.facts.cases import Shape
    from regress.kernel.loader import load_library
    from regress.run.suites.common import make_inputs

    lib = load_library(sys.argv[1])
    # Three shapes that take different launches (kernel/cuda/plan.h's plan): the
    # short-key kernel, a split in 4 with the merge kernel, decode's split in 8 merged in the kernel;
    # so the threads also race on different smem-attribute bits and on the split workspaces.
    shapes = [Shape(2, 4, 200, 77), Shape(1, 8, 300, 1000), Shape(2, 8, 1, 4096)]
    inputs = [make_inputs(s, "bhsd", seed=i, device="cuda") for i, s in enumerate(shapes)]
    streams = [torch.cuda.Stream() for _ in range(8)]
    torch.cuda.synchronize()  # the inputs are ready before other streams read them
    outs, errors = [None] * 8, []
    gate = threading.Barrier(8)

    def run(i):
        try:
            q, k, v = inputs[i % 3]
            with torch.cuda.stream(streams[i]):
                gate.wait()
                outs[i] = lib.forward(q, k, v, layout="bhsd", rounding="rtne")
        except Exception as exc:
            errors.append(f"thread {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    assert not errors, errors
    for i, out in enumerate(outs):
        q, k, v = inputs[i % 3]
        again = lib.forward(q, k, v, layout="bhsd", rounding="rtne")
        assert torch.equal(out.view(torch.int16), again.view(torch.int16)), f"thread {i} differs"
    print("ok")
    """
)


def test_first_calls_from_eight_threads_equal_a_single_call(gpu_device: str) -> None:
    import torch

    if torch.version.hip:
        pytest.skip("a HIP GPU: this checks the CUDA backend's first-call state")
    path = build_kernel("cuda").path
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr
