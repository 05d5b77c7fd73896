"""A small and an odd shape through the CUDA library, for compute-sanitizer (memcheck, racecheck).

Uses the ctypes loader only (no database), so it starts fast under the sanitizer.
"""

from __future__ import annotations

import torch

from regress.facts.results import LAYOUTS, ROUNDING_MODES
from regress.kernel import load_library
from regress.native.build import build_kernel


def main() -> None:
    lib = load_library(build_kernel("cuda").path)
    for b, h, sq, sk in ((1, 2, 128, 128), (1, 3, 77, 203), (2, 1, 1, 1)):
        for layout in LAYOUTS:
            shape_q = (b, sq, h, 128) if layout == "bshd" else (b, h, sq, 128)
            shape_k = (b, sk, h, 128) if layout == "bshd" else (b, h, sk, 128)
            q = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(shape_k, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(shape_k, device="cuda", dtype=torch.bfloat16)
            for mode in ROUNDING_MODES:
                lib.forward(q, k, v, layout=layout, rounding=mode)
    torch.cuda.synchronize()
    print("sanitize_case: done")


if __name__ == "__main__":
    main()
