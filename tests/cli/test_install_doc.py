"""Issue #42 item 3: the install guide gives the CPU-only path first, and setup.sh follows it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "install.md").read_text()


def test_the_cpu_torch_line_comes_before_any_install_of_regress() -> None:
    cpu = DOC.index('pip install torch==2.13.0 --index-url "$TORCH_CPU_INDEX"')
    installs = [m.start() for m in re.finditer(r"pip install (dist/regress|-e |\.)", DOC)]
    assert installs and cpu < min(installs)
    assert DOC.index("TORCH_CPU_INDEX") < DOC.index("## From a checkout")


def test_rocm_and_cuda_each_get_a_note() -> None:
    assert "**ROCm (MI300X):**" in DOC and "**CUDA (H200):**" in DOC


def test_the_guide_names_no_package_host() -> None:
    # The index is the reader's to set (PyTorch's selector gives it): no URL to go stale here.
    assert not re.search(r"https?://", DOC)


def test_setup_sh_takes_the_cpu_index() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '--index-url "$TORCH_CPU_INDEX"' in setup
