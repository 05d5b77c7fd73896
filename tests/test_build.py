"""regress.native.build: the CPU build, its cache, its failures, and the resource-report parsers."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from regress.native import build
from regress.native.build import BuildError, build_kernel


@pytest.fixture(scope="module")
def clean_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, build.BuildArtifact]:
    """One real clean build for the module (about 2 s of g++ each); a test that changes the cache
    works on a copy of it."""
    cache = tmp_path_factory.mktemp("build-cache")
    return cache, build_kernel("cpu", cache_dir=cache)


def _copy(clean_cache: tuple[Path, build.BuildArtifact], tmp_path: Path) -> Path:
    shutil.copytree(clean_cache[0], tmp_path / "cache")
    return tmp_path / "cache"


def test_cpu_build_then_cache_hit(clean_cache: tuple[Path, build.BuildArtifact]) -> None:
    cache, a = clean_cache
    assert not a.cached and a.path.is_file() and a.backend == "cpu"
    assert a.artifact_hash == hashlib.sha256(a.path.read_bytes()).hexdigest()
    assert a.flags[0] == "g++" and a.flags[-2:] == ["-o", "<out>"] and "-ffp-contract=off" in a.flags
    assert a.compiler == "g++" and "g++" in a.compiler_version and "Copyright" not in a.compiler_version
    assert len(a.source_hash) == 64 and a.source_hash == build.source_hash("cpu")
    assert a.build_seconds > 0 and a.inject == {}
    meta = json.loads((a.path.parent / "build.json").read_text())
    assert meta["artifact_hash"] == a.artifact_hash and meta["flags"] == a.flags

    b = build_kernel("cpu", cache_dir=cache)
    assert b.cached and b.path == a.path and b.artifact_hash == a.artifact_hash
    assert a.path.parent.name.startswith("cpu-")


@pytest.mark.slow  # several builds (1.7 s CPU)
def test_inject_and_flags_change_the_key(
    clean_cache: tuple[Path, build.BuildArtifact], tmp_path: Path
) -> None:
    cache = _copy(clean_cache, tmp_path)
    clean = build_kernel("cpu", cache_dir=cache)
    drill = build_kernel("cpu", cache_dir=cache, inject={"ulp": 1, "slowdown_pct": 0})
    assert clean.cached and not drill.cached
    assert drill.path.parent != clean.path.parent
    assert "-DRA_INJECT_ULP=1" in drill.flags and not any("SLOWDOWN" in f for f in drill.flags)
    assert drill.inject == {"ulp": 1}
    # Injected flags come before the source file, like extra flags.
    assert drill.flags.index("-DRA_INJECT_ULP=1") < drill.flags.index("kernel/cpu/attention_cpu.cpp")


@pytest.mark.slow  # two builds (1.6 s CPU)
def test_damaged_cache_entry_is_rebuilt(
    clean_cache: tuple[Path, build.BuildArtifact], tmp_path: Path
) -> None:
    cache = _copy(clean_cache, tmp_path)
    a = build_kernel("cpu", cache_dir=cache)
    assert a.cached
    a.path.write_bytes(b"not a library")
    b = build_kernel("cpu", cache_dir=cache)
    assert not b.cached and b.artifact_hash == hashlib.sha256(b.path.read_bytes()).hexdigest()


@pytest.mark.parametrize("meta", ["[]", '"build"', "3", "null"])
def test_cache_meta_that_is_not_an_object_is_rebuilt(tmp_path: Path, meta: str) -> None:
    """Valid JSON but not the object a build writes: a cache miss (it was an AttributeError that
    stopped the build instead of rebuilding)."""
    (tmp_path / "libregress_attn_cpu.so").write_bytes(b"an artifact")
    (tmp_path / build.BUILD_JSON).write_text(meta)
    assert build._load_cached(tmp_path, "libregress_attn_cpu.so") is None


def test_missing_compiler(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="compiler 'no-such-compiler-xyz' not found"):
        build_kernel("cpu", compiler="no-such-compiler-xyz", cache_dir=tmp_path)


def test_bad_arguments() -> None:
    with pytest.raises(BuildError, match="unknown backend"):
        build_kernel("fpga")
    with pytest.raises(BuildError, match="unknown inject key"):
        build_kernel("cpu", inject={"bogus": 1})
    with pytest.raises(BuildError, match="non-negative integer"):
        build_kernel("cpu", inject={"ulp": -1})


def _fake_tree(root: Path) -> None:
    """A copy of kernel/include and kernel/common, so a fake backend source can be dropped in."""
    for d in ("include", "common"):
        shutil.copytree(build.KERNEL_DIR / d, root / "kernel" / d)


def test_bad_source_reports_compiler_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    _fake_tree(root)
    (root / "kernel" / "cpu").mkdir()
    (root / "kernel" / "cpu" / "attention_cpu.cpp").write_text("this is not C++;\n")
    monkeypatch.setattr(build, "REPO_ROOT", root)
    with pytest.raises(BuildError, match=r"g\+\+ failed \(exit 1\)") as e:
        build_kernel("cpu", cache_dir=tmp_path / "cache")
    assert "attention_cpu.cpp" in str(e.value) and "error" in str(e.value)
    assert not any((tmp_path / "cache").iterdir())  # nothing half-built left behind


def test_source_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    _fake_tree(root)
    monkeypatch.setattr(build, "REPO_ROOT", root)
    with pytest.raises(BuildError, match=r"source missing: kernel/cuda/attention_sm90\.cu"):
        build_kernel("cuda", cache_dir=tmp_path / "cache")


def test_source_hash_covers_shared_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    _fake_tree(root)
    (root / "kernel" / "cpu").mkdir()
    (root / "kernel" / "cpu" / "attention_cpu.cpp").write_text("int x;\n")
    (root / "kernel" / "hip").mkdir()
    monkeypatch.setattr(build, "REPO_ROOT", root)
    before = build.source_hash("cpu")
    (root / "kernel" / "hip" / "other.hip").write_text("unrelated\n")
    assert build.source_hash("cpu") == before  # another backend's files do not count
    with (root / "kernel" / "common" / "bf16.h").open("a") as f:
        f.write("\n")
    assert build.source_hash("cpu") != before


FAKE_HIP = """
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
__global__ void flip(float* x) {
  __shared__ float s[256];
  int t = __builtin_amdgcn_workitem_id_x();
  s[t] = x[t];
  __builtin_amdgcn_s_barrier();
  x[t] = s[255 - t];
}
"""


@pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 is not installed")
def test_hip_compile_only_reports_resources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    _fake_tree(root)
    (root / "kernel" / "hip").mkdir()
    (root / "kernel" / "hip" / "attention_gfx942.hip").write_text(FAKE_HIP)
    monkeypatch.setattr(build, "REPO_ROOT", root)
    a = build_kernel("hip", compile_only=True, cache_dir=tmp_path / "cache")
    assert a.compile_only and a.path.suffix == ".co" and a.compiler == "clang-19"
    k = a.stats["kernels"]["_Z4flipPf"]
    assert k["lds_bytes"] == 1024 and k["scratch_bytes"] == 0 and k["vgprs"] >= 1 and "occupancy" in k
    assert a.stats["max_spill"] == 0 and a.stats["max_shared_bytes"] == 1024


PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z9attn_fwdILi0EEvP6Params' for 'sm_90a'
ptxas info    : Function properties for _Z9attn_fwdILi0EEvP6Params
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 49152 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function '_Z9attn_fwdILi1EEvP6Params' for 'sm_90a'
ptxas info    : Function properties for _Z9attn_fwdILi1EEvP6Params
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 128 registers, 400 bytes cmem[0]
"""


def test_parse_ptxas() -> None:
    s = build.parse_ptxas(PTXAS)
    a = s["kernels"]["_Z9attn_fwdILi0EEvP6Params"]
    assert a == {
        "stack_bytes": 16, "spill_store_bytes": 8, "spill_load_bytes": 12, "registers": 168,
        "smem_bytes": 49152, "barriers": 1,
    }  # fmt: skip
    assert s["kernels"]["_Z9attn_fwdILi1EEvP6Params"]["registers"] == 128
    assert s["max_registers"] == 168 and s["max_spill"] == 20 and s["max_shared_bytes"] == 49152
    assert build.parse_ptxas("") == {}


def test_parse_amdgpu_remarks() -> None:
    text = "\n".join(
        f"a.hip:3:1: remark: {line} [-Rpass-analysis=kernel-resource-usage]"
        for line in (
            "Function Name: _Z1kPf", "    SGPRs: 8", "    VGPRs: 3", "    AGPRs: 4",
            "    ScratchSize [bytes/lane]: 16", "    Dynamic Stack: False", "    Occupancy [waves/SIMD]: 8",
            "    SGPRs Spill: 0", "    VGPRs Spill: 2", "    LDS Size [bytes/block]: 1024",
        )
    )  # fmt: skip
    s = build.parse_amdgpu_remarks(text)
    assert s["kernels"]["_Z1kPf"] == {
        "sgprs": 8, "vgprs": 3, "agprs": 4, "scratch_bytes": 16, "dynamic_stack": False, "occupancy": 8,
        "sgpr_spill": 0, "vgpr_spill": 2, "lds_bytes": 1024,
    }  # fmt: skip
    assert s["max_spill"] == 2 and s["max_scratch_bytes"] == 16
