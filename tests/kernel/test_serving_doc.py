"""docs/serving.md's worked examples run as written: the C program against the built CPU library
(and prints what the page says), the two Python blocks as they stand."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from regress.native.build import REPO_ROOT, build_kernel

DOC = REPO_ROOT / "docs" / "serving.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_c_example_runs_and_prints_what_the_page_says(tmp_path: Path) -> None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    (src,) = _blocks("c")
    (tmp_path / "ex.c").write_text(src)
    lib = build_kernel("cpu").path
    exe = tmp_path / "ex"
    subprocess.run(
        [cc, "-std=c11", "-I", str(REPO_ROOT / "kernel"), str(tmp_path / "ex.c"), str(lib), "-o", str(exe),
         f"-Wl,-rpath,{lib.parent}"],
        check=True,
    )  # fmt: skip
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.strip()
    claimed = re.search(r"Prints `([^`]*)`", DOC.read_text())
    assert claimed is not None and out == claimed.group(1)


@pytest.mark.parametrize("index", [0, 1])
def test_the_python_examples_run(index: int) -> None:
    exec(compile(_blocks("python")[index], f"{DOC}:python[{index}]", "exec"), {})
