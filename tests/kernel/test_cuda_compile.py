"""Compile-only proof of the CUDA sm_90a backend (kernel/cuda/attention_sm90.cu).

No GPU is needed: nvcc builds the library exactly as the build module does, and the tests read
ptxas' resource report (-Xptxas -v) and, where cuobjdump is installed, the SASS. What runs on the
device (numerics, speed, sanitizers) is benchmarks/h200_kernel.py's job; docs/perf-notes.md has
its figures.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from regress.build import build_kernel

ROOT = Path(__file__).resolve().parents[2]
NVCC = shutil.which("nvcc")

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: cannot compile the sm_90a library")

MODES = 3
LAYOUTS = 2
SCHEDULES = 1  # sm90: the default build has no ping-pong variant (-DRA_CUDA_PINGPONG=-1 makes it 2)
ABI_SYMBOLS = {"ra_attention_fwd", "ra_validate", "ra_backend_name", "ra_build_info"}

ENTRY_RE = re.compile(r"Compiling entry function '(?P<name>[^']+)' for 'sm_90a'")
FRAME_RE = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads"
)
REGS_RE = re.compile(r"Used (?P<regs>\d+) registers")


def find_tool(name: str) -> str | None:
    """On PATH, or shipped by the CUDA pip packages (nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm)."""
    hit = shutil.which(name)
    if hit:
        return hit
    for base in sys.path:
        for sub in ("nvidia/cu13/bin", "nvidia/cuda_cuobjdump/bin", "nvidia/cuda_nvdisasm/bin"):
            cand = Path(base) / sub / name
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return None


def parse_ptxas(text: str) -> dict[str, dict[str, int]]:
    """Kernel name -> {stack, spill_stores, spill_loads, registers} from -Xptxas -v output."""
    kernels: dict[str, dict[str, int]] = {}
    cur = None
    for line in text.splitlines():
        m = ENTRY_RE.search(line)
        if m:
            cur = kernels.setdefault(m.group("name"), {})
            continue
        if cur is None:
            continue
        m = FRAME_RE.search(line)
        if m:
            cur.update(stack=int(m["stack"]), spill_stores=int(m["st"]), spill_loads=int(m["ld"]))
        m = REGS_RE.search(line)
        if m:
            cur["registers"] = int(m["regs"])
    return kernels


def build(out: Path, *defines: str) -> tuple[Path, str]:
    """Builds through the project's one build path (regress.build), so the checks below hold for
    exactly what `regress build --backend cuda` produces; returns the library and ptxas' log."""
    art = build_kernel("cuda", extra_flags=defines, cache_dir=out)
    return art.path, (art.path.parent / "build.log").read_text()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda"))


def test_every_kernel_is_reported(built):
    kernels = parse_ptxas(built[1])
    sm90 = [k for k in kernels if "attn_fwd_sm90" in k]
    mma = [k for k in kernels if "attn_fwd_mma_sync" in k]
    assert len(sm90) == MODES * LAYOUTS * SCHEDULES, kernels.keys()
    assert len(mma) == MODES * LAYOUTS, kernels.keys()


def test_no_spills_no_stack(built):
    kernels = parse_ptxas(built[1])
    for name, r in kernels.items():
        assert r.get("stack") == 0, f"{name}: {r}"
        assert r.get("spill_stores") == 0 and r.get("spill_loads") == 0, f"{name}: {r}"


def test_register_budget(built):
    """The warp-specialised kernel runs 384 threads, one CTA per SM: 65536 / 384 -> 168 at entry
    (setmaxnreg then moves 40 -> producer, 232 -> consumers)."""
    for name, r in parse_ptxas(built[1]).items():
        if "attn_fwd_sm90" in name:
            assert r["registers"] <= 168, f"{name}: {r}"


def test_wgmma_not_serialized(built):
    # ptxas says so (C7515 and family) when it must serialise wgmma for register hazards; C7517 says
    # it injected a wait for registers still in flight (an overlap lost). C7519 (an injected
    # warpgroup.arrive, a register fence) is allowed.
    assert "serialized" not in built[1], built[1]
    assert "(C7517)" not in built[1], built[1]


def test_inject_builds_compile(tmp_path):
    """A fire-drill build with every fault on still compiles without spills."""
    _, text = build(tmp_path, "-DRA_INJECT_ULP=1", "-DRA_INJECT_NONDET=1", "-DRA_INJECT_SLOWDOWN_PCT=25")
    for name, r in parse_ptxas(text).items():
        assert r.get("spill_stores") == 0 and r.get("stack") == 0, f"{name}: {r}"


def test_exports_exactly_the_abi(built):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not installed: cannot list the library's dynamic symbols")
    out = subprocess.run(
        [nm, "-D", "--defined-only", str(built[0])], capture_output=True, text=True, check=True
    )
    ra = {
        line.split()[-1]
        for line in out.stdout.splitlines()
        if line.split() and line.split()[-1].startswith("ra_")
    }
    assert ra == ABI_SYMBOLS


def test_sass_tensor_cores_and_no_local_memory(built):
    cuobjdump = find_tool("cuobjdump")
    nvdisasm = find_tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip(
            "cuobjdump/nvdisasm not found (pip packages nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm "
            "provide them): SASS not checked"
        )
    env = dict(os.environ, PATH=str(Path(nvdisasm).parent) + os.pathsep + os.environ.get("PATH", ""))
    sass = subprocess.run(
        [cuobjdump, "--dump-sass", str(built[0])], capture_output=True, text=True, env=env, check=True
    ).stdout
    funcs: dict[str, list[str]] = {}
    cur = None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
        elif cur is not None:
            cur.append(line)
    assert len(funcs) == (SCHEDULES + 1) * MODES * LAYOUTS, list(funcs)
    for name, lines in funcs.items():
        body = "\n".join(lines)
        assert not re.search(r"\b(LDL|STL)\b", body), f"{name} uses local memory"
        if "attn_fwd_sm90" in name:
            # 8 k-steps x (Q K^T of the first tile, of an idle warpgroup's next tile, of the key
            # loop and of the next tile beside the last P V; P V of the key loop and of the last block)
            assert len(re.findall(r"\bHGMMA\.64x128x16\.F32\.BF16\b", body)) == 48, name
            # the epilogue's 16-byte global stores (smem-staged)
            assert re.search(r"\bSTG\.E\.128\b", body), name
        else:
            assert re.search(r"\bHMMA\.16816\.F32\.BF16\b", body), name
