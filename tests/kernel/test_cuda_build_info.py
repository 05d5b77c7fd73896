"""The sm_90a library's build info names every build flag (kernel/cuda): a bundle's build info is how
an ablation build (`-DRA_CUDA_...=N`) is told from the default one, so a flag it leaves out makes two
different kernels read the same. A source check: no nvcc needed."""

from __future__ import annotations

import re
from pathlib import Path

CUDA = Path(__file__).resolve().parents[2] / "kernel" / "cuda"


def test_every_cuda_build_flag_is_in_the_build_info() -> None:
    flags = {
        m for f in CUDA.glob("*.cu*") for m in re.findall(r"^#ifndef (RA_CUDA_\w+)$", f.read_text(), re.M)
    }
    source = (CUDA / "attention_sm90.cu").read_text()
    info = source[source.index('extern "C" const char* ra_build_info(void)') :]
    info = info[: info.index("\n}\n")]
    assert len(flags) > 10, flags  # the scan found the flags
    missing = sorted(f for f in flags if f"RA_XSTR({f})" not in info)
    assert not missing, f"ra_build_info does not report {missing}"
