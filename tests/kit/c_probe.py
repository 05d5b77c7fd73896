"""A small C program or shared library built from source text against kernel/ by the system C
compiler: for the tests that check a header's plain-C view (the ABI's struct layout, bf16.h's helpers)
without a GPU toolkit. Skips the calling test where there is no C compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

KERNEL = Path(__file__).resolve().parents[2] / "kernel"


def build_c(source: str, folder: Path, *, shared: bool = False, flags: tuple[str, ...] = ()) -> Path:
    """`source` compiled in `folder` (-std=c11, -I kernel/, then `flags`): an executable, or with
    `shared` a library for ctypes; a compile error fails the test with the compiler's message."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (gcc or cc) on PATH")
    src = folder / "probe.c"
    src.write_text(source)
    out = folder / ("libprobe.so" if shared else "probe")
    kind = ["-shared", "-fPIC"] if shared else []
    subprocess.run([cc, "-std=c11", "-I", str(KERNEL), *kind, *flags, str(src), "-o", str(out)], check=True)
    return out
