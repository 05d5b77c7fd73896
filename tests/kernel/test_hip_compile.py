"""Compile-only proof of the gfx942 HIP backend (kernel/hip/attention_gfx942.hip).

No AMD GPU is needed: clang-19 compiles the device code for gfx942 and the tests read the code
object. What this proves and what it does not is written down in docs/hip-gfx942.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from regress.emu.codeobject import CodeObject as EmuCodeObject
from regress.emu.hazards import scan
from regress.native.build import build_kernel

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "kernel" / "hip" / "attention_gfx942.hip"

CLANG = shutil.which("clang-19")
OBJDUMP = shutil.which("llvm-objdump-19")
READELF = shutil.which("llvm-readelf-19")

pytestmark = pytest.mark.skipif(
    not (CLANG and OBJDUMP and READELF),
    reason=(
        "clang-19, llvm-objdump-19 and llvm-readelf-19 are needed to compile and read the gfx942 code object"
    ),
)

MFMA = "v_mfma_f32_16x16x16_bf16"
VARIANTS = [
    f"ra_attn_fwd_gfx942_{mode}_{layout}"
    for layout in ("packed", "strided")
    for mode in ("rtne", "rtna", "rtz")
]
# ABI v2 (issue 40: GQA, causal masks, varlen, the LSE): the same key loop on its own argument block,
# one kernel per (mode, layout); the dense kernels above are left as they were.
V2_KERNELS = [
    f"ra_attn_v2_gfx942_{mode}_{layout}"
    for layout in ("packed", "strided")
    for mode in ("rtne", "rtna", "rtz")
]
# Step 10 (the tail split, kernel/hip/parts/plan.h): the split parts' kernel per layout (same tile
# loop, fp32 partials) and the merge per (mode, layout).
SPLIT_KERNELS = [f"ra_attn_split_gfx942_{layout}" for layout in ("packed", "strided")]
MERGE_KERNELS = [
    f"ra_attn_merge_gfx942_{mode}_{layout}"
    for layout in ("packed", "strided")
    for mode in ("rtne", "rtna", "rtz")
]
# The v2 kernels' tail split (issue 40, plan gfx942_v2_split): the same two on the v2 argument block.
V2_SPLIT_KERNELS = [f"ra_attn_v2_split_gfx942_{layout}" for layout in ("packed", "strided")]
V2_MERGE_KERNELS = [
    f"ra_attn_v2_merge_gfx942_{mode}_{layout}"
    for layout in ("packed", "strided")
    for mode in ("rtne", "rtna", "rtz")
]
SPLITS = SPLIT_KERNELS + V2_SPLIT_KERNELS
MERGES = MERGE_KERNELS + V2_MERGE_KERNELS
# Issue 40's decode kernels (kernel/hip/parts/waves.h: a q-block of at most 32 rows, its keys spread
# over the eight waves): rounded per (mode, layout), and the split part per layout.
WAVES_KERNELS = [
    f"ra_attn_waves_gfx942_{mode}_{layout}"
    for layout in ("packed", "strided")
    for mode in ("rtne", "rtna", "rtz")
]
WAVES_SPLIT_KERNELS = [f"ra_attn_waves_split_gfx942_{layout}" for layout in ("packed", "strided")]
# Their key loop: a wave's share of a tile is 8 MFMAs of S and 8 of PV: M(0)'s S, the loop's PV and
# S, M(n)'s last PV.
WAVES_LOOP_MFMAS = 8 + 16 + 8
ALL_KERNELS = VARIANTS + SPLITS + MERGES + V2_KERNELS + WAVES_KERNELS + WAVES_SPLIT_KERNELS
# Step 13's key loop (kernel/hip/parts/schedule.h) in the code: M(0)'s S (64 MFMAs), the loop's M phase
# (PV then S, 128: a tile's work) and M(n)'s last PV (64), with 16 + 24 + 8 LDS fragment reads and the
# 8 + 8 of the X phase's prefetch (two copies of it: in the loop and after it).
KEY_LOOP_MFMAS = 64 + 128 + 64
KEY_LOOP_LDS_READS = 16 + 24 + 8 + 2 * 8


def key_loops(name: str) -> int:
    """Copies of the key loop in a kernel: a strided one also holds the row-resource copy of sequence
    strides of 2^25 elements or more (kernel/hip/parts/copy.h, kv_rows_fit); a v2 kernel also the safe
    loop of a block whose diagonal V holds a non-finite element (kernel/hip/parts/stair.h)."""
    return (2 if name.endswith("strided") else 1) + (name in V2_KERNELS)


# One record per kernel in the -Rpass-analysis=kernel-resource-usage remarks.
REMARK_RE = re.compile(
    r"remark:\s+(?P<key>[A-Za-z][A-Za-z /\[\]]*?): (?P<val>\S+) \[-Rpass-analysis=kernel-resource-usage\]"
)


def parse_resource_remarks(text: str) -> dict[str, dict[str, str]]:
    kernels: dict[str, dict[str, str]] = {}
    current = None
    for m in REMARK_RE.finditer(text):
        key, val = m.group("key"), m.group("val")
        if key == "Function Name":
            current = kernels.setdefault(val, {})
        elif current is not None:
            current[key] = val
    return kernels


class CodeObject:
    def __init__(self, path: Path, remarks: str):
        self.path = path
        self.resources = parse_resource_remarks(remarks)
        self.disasm = subprocess.run(
            [OBJDUMP, "-d", str(path)], check=True, capture_output=True, text=True
        ).stdout
        self.header = subprocess.run(
            [READELF, "-h", str(path)], check=True, capture_output=True, text=True
        ).stdout
        self.symbols = subprocess.run(
            [READELF, "-s", str(path)], check=True, capture_output=True, text=True
        ).stdout

    def functions(self) -> dict[str, list[str]]:
        """Instruction lines per function symbol."""
        out: dict[str, list[str]] = {}
        cur = None
        for line in self.disasm.splitlines():
            m = re.match(r"^[0-9a-f]+ <([^>]+)>:", line)
            if m:
                cur = out.setdefault(m.group(1), [])
            elif cur is not None and line.startswith("\t"):
                cur.append(line)
        return out


def compile_variant(tmp_path_factory, *defines: str) -> CodeObject:
    """Compiles through the project's one build path (regress.build, `hip --compile-only`), so what is
    checked here is exactly what `regress build --backend hip --compile-only` produces."""
    art = build_kernel(
        "hip", compile_only=True, extra_flags=defines, cache_dir=tmp_path_factory.mktemp("gfx942")
    )
    return CodeObject(art.path, (art.path.parent / "build.log").read_text())


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> CodeObject:
    return compile_variant(tmp_path_factory)


# ---------------------------------------------------------------------------------------------
# Static MFMA hazard scan (the compiler does not model MFMAs inside inline asm; see parts/mfma.h):
# regress.emu.hazards, the same rule table the emulator checks every launch against.
# ---------------------------------------------------------------------------------------------
def mfma_hazards(path: Path, name: str) -> list[str]:
    """Every broken MFMA window of kernel `name` in the code object at `path`."""
    return [str(f) for f in scan(EmuCodeObject.load(path).kernels[name].instructions)]


# ---------------------------------------------------------------------------------------------
def test_code_object_is_gfx942_elf(clean):
    assert "EM_AMDGPU" in clean.header
    assert "gfx942" in clean.header
    assert "ELF64" in clean.header


def test_all_variant_kernels_present(clean):
    funcs = clean.functions()
    for name in VARIANTS:
        assert name in funcs, f"kernel {name} missing from the code object"
        assert f"{name}.kd" in clean.symbols, f"kernel descriptor {name}.kd missing"
    for name in SPLITS + MERGES + V2_KERNELS + WAVES_KERNELS + WAVES_SPLIT_KERNELS:
        assert name in funcs and f"{name}.kd" in clean.symbols, f"kernel {name} missing"
    assert set(clean.resources) == set(ALL_KERNELS)


def test_waves_kernels_spread_a_tile_over_the_waves(clean):
    """The decode kernels (parts/waves.h): a wave's 16 MFMAs a tile in each key-loop copy, K by
    direct-to-LDS loads as the dense loop's (the same copies), no scratch, no flat access, and the
    resources of the dense kernels: <= 256 VGPRs (2 waves/SIMD), 64 KiB LDS."""
    funcs = clean.functions()
    for name in WAVES_KERNELS + WAVES_SPLIT_KERNELS:
        assert sum(MFMA in ln for ln in funcs[name]) == WAVES_LOOP_MFMAS * key_loops(name), name
        assert not any("scratch_" in ln or re.search(r"\tflat_", ln) for ln in funcs[name]), name
        dma = sum(
            re.search(r"\tbuffer_load_dword .* lds$", ln.split("//")[0].rstrip()) is not None
            for ln in funcs[name]
        )
        assert dma == 2 * 3 * 8 * key_loops(name), name
        r = clean.resources[name]
        assert r["ScratchSize [bytes/lane]"] == "0" and r["Dynamic Stack"] == "False", name
        assert r["SGPRs Spill"] == "0" and r["VGPRs Spill"] == "0", name
        assert int(r["VGPRs"]) + int(r["AGPRs"]) <= 256, name
        assert int(r["LDS Size [bytes/block]"]) == 65536, name
        assert int(r["Occupancy [waves/SIMD]"]) >= 2, name


def test_split_kernels_run_the_same_tile_loop(clean):
    """The split part is the dense (or v2) kernel's key loop (its MFMAs and LDS fragment reads, 2
    waves/SIMD at 64 KiB LDS, no scratch, no spill, <= 256 VGPRs) with another epilogue; the merge has
    no MFMA and no LDS."""
    funcs = clean.functions()
    for name in SPLITS:
        assert sum(MFMA in ln for ln in funcs[name]) == KEY_LOOP_MFMAS * key_loops(name)
        assert sum("ds_read_b128" in ln for ln in funcs[name]) == KEY_LOOP_LDS_READS * key_loops(name)
        assert not any(re.search(r"\tflat_|scratch_", ln) for ln in funcs[name]), name
        r = clean.resources[name]
        assert r["VGPRs Spill"] == "0" and r["SGPRs Spill"] == "0" and r["ScratchSize [bytes/lane]"] == "0"
        assert int(r["VGPRs"]) + int(r["AGPRs"]) <= 256 and r["Dynamic Stack"] == "False"
        assert int(r["LDS Size [bytes/block]"]) == 65536
        assert int(r["Occupancy [waves/SIMD]"]) >= 2
    for name in MERGES:
        assert not any(re.search(r"\tflat_|scratch_", ln) for ln in funcs[name]), name
        assert not any(MFMA in ln for ln in funcs[name])
        assert clean.resources[name]["LDS Size [bytes/block]"] == "0"
        assert clean.resources[name]["ScratchSize [bytes/lane]"] == "0"


def test_disassembly_uses_bf16_mfma(clean):
    funcs = clean.functions()
    for name in VARIANTS + V2_KERNELS:
        count = sum(MFMA in line for line in funcs[name])
        want = KEY_LOOP_MFMAS * key_loops(name)
        assert count == want, f"{name}: {count} x {MFMA}, expected {want}"
        assert not any("scratch_" in ln or "buffer_store" in ln for ln in funcs[name]), (
            f"{name} touches scratch"
        )
        # K and V^T fragments come from LDS in 16-byte reads; no generic (flat) memory access.
        assert sum("ds_read_b128" in ln for ln in funcs[name]) == KEY_LOOP_LDS_READS * key_loops(name)
        assert not any(re.search(r"\tflat_", ln) for ln in funcs[name])
        # K reaches LDS by direct-to-LDS loads, 8 rows in each of the prologue, M(0) and the loop's M
        # phase, in each key-loop copy for a wave with query rows and one without (a v2 kernel copies
        # K(0) before the key loop instead, once per copy method: parts/copy.h issue_k0); M0 is
        # written only by their asm (the compiler never uses it).
        dma = sum(
            re.search(r"\tbuffer_load_dword .* lds$", ln.split("//")[0].rstrip()) is not None
            for ln in funcs[name]
        )
        if name in V2_KERNELS:
            assert dma == 2 * 2 * 8 * key_loops(name) + 8 * (2 if name.endswith("strided") else 1)
        else:
            assert dma == 2 * 3 * 8 * key_loops(name)
        m0_writes = [ln for ln in funcs[name] if re.search(r"\ts_\w+ m0,", ln)]
        assert m0_writes and all("s_add_u32 m0," in ln for ln in m0_writes), m0_writes[:3]


@pytest.mark.parametrize("name", VARIANTS + V2_KERNELS)
def test_resources_no_scratch_no_spills(clean, name):
    r = clean.resources[name]
    assert r["ScratchSize [bytes/lane]"] == "0"
    assert r["Dynamic Stack"] == "False"
    assert r["SGPRs Spill"] == "0"
    assert r["VGPRs Spill"] == "0"
    assert int(r["VGPRs"]) + int(r["AGPRs"]) <= 256  # 512 threads = 2 waves per SIMD must fit
    assert int(r["LDS Size [bytes/block]"]) == 65536  # K and V^T tiles, both double-buffered
    assert int(r["Occupancy [waves/SIMD]"]) >= 2


@pytest.mark.slow  # a gfx942 build and its disassembly (2.5 s CPU)
def test_inline_asm_mfma_hazards_are_covered(clean):
    for name in ALL_KERNELS:
        problems = mfma_hazards(clean.path, name)
        assert not problems, f"{name}: {len(problems)} MFMA hazard(s), first: {problems[:5]}"


@pytest.mark.slow  # one more gfx942 build (5-10 s of clang-19); plain pytest checks the clean one
def test_static_scan_agrees_with_the_compilers_hazard_recognizer(tmp_path_factory):
    """With the builtin MFMA the compiler's own GCNHazardRecognizer places the wait states: the
    scan, reading the same rules, finds nothing to add (and its MFMAs are seen, ranges and all)."""
    co = compile_variant(tmp_path_factory, "-DRA_HIP_MFMA_BUILTIN=1")
    for name in VARIANTS + V2_KERNELS + WAVES_KERNELS + WAVES_SPLIT_KERNELS:
        problems = mfma_hazards(co.path, name)
        assert not problems, f"{name}: {len(problems)} finding(s), first: {problems[:5]}"


@pytest.mark.slow  # one more gfx942 build (5-10 s of clang-19); plain pytest checks the clean one
def test_mfma_builtin_variant_builds(tmp_path_factory):
    co = compile_variant(tmp_path_factory, "-DRA_HIP_MFMA_BUILTIN=1")
    for name in VARIANTS:
        assert co.resources[name]["ScratchSize [bytes/lane]"] == "0"
        assert sum(MFMA in ln for ln in co.functions()[name]) == KEY_LOOP_MFMAS * key_loops(name)


@pytest.mark.slow  # one more gfx942 build (5-10 s of clang-19); plain pytest checks the clean one
@pytest.mark.parametrize(
    "defines",
    [
        ("-DRA_INJECT_ULP=2",),
        ("-DRA_INJECT_SLOWDOWN_PCT=25",),
        ("-DRA_INJECT_NONDET=1",),
        ("-DRA_INJECT_ROUND_SWAP=5",),
    ],
    ids=["ulp2", "slowdown25", "nondet", "round_swap"],
)
def test_fire_drill_variants_build(tmp_path_factory, defines):
    co = compile_variant(tmp_path_factory, *defines)
    funcs = co.functions()
    for name in VARIANTS + WAVES_KERNELS:
        assert co.resources[name]["ScratchSize [bytes/lane]"] == "0"
        assert co.resources[name]["VGPRs Spill"] == "0"
        assert not mfma_hazards(co.path, name)
    if defines[0].startswith("-DRA_INJECT_SLOWDOWN_PCT"):
        # 25 % of a tile's 128 MFMAs more, in the two M phases that compute S (M(0) and the loop's);
        # the decode kernels' 25 % of a wave's 16
        extra = (128 * 25 + 50) // 100
        assert sum(MFMA in ln for ln in funcs[VARIANTS[0]]) == KEY_LOOP_MFMAS + 2 * extra
        extra = (16 * 25 + 50) // 100
        assert sum(MFMA in ln for ln in funcs[WAVES_KERNELS[0]]) == WAVES_LOOP_MFMAS + 2 * extra


def test_hazard_scan_catches_unguarded_asm(tmp_path):
    """The scanner must flag the case that motivated it: an asm MFMA read by a VALU right away."""
    src = tmp_path / "bad.hip"
    src.write_text(
        "typedef float f4 __attribute__((ext_vector_type(4)));\n"
        "typedef short s4 __attribute__((ext_vector_type(4)));\n"
        'extern "C" __attribute__((global)) void bad(float* o, const s4* a, const s4* b) {\n'
        "  f4 c = {0, 0, 0, 0};\n"
        '  asm volatile("v_mfma_f32_16x16x16_bf16 %0, %1, %2, %0" : "+v"(c) : "v"(a[0]), "v"(b[0]));\n'
        "  o[0] = c[0] * c[1] + c[2];\n"
        "}\n"
    )
    out = tmp_path / "bad.co"
    proc = subprocess.run(
        [
            CLANG,
            "-x",
            "hip",
            "--offload-arch=gfx942",
            "-nogpulib",
            "-nogpuinc",
            "--cuda-device-only",
            "--no-gpu-bundle-output",
            "-O3",
            "-c",
            str(src),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    problems = mfma_hazards(out, "bad")
    # the result read right after the MFMA (the compiler also puts the B operand's v_mov just before it)
    assert any("[mfma-result-read]" in p for p in problems), problems


_HIP_STUB = """\
// Minimal stand-in for <hip/hip_runtime.h>: enough to type-check the host part, not to run it.
#pragma once
#include <stddef.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __forceinline__ inline __attribute__((always_inline))
struct dim3 {
  unsigned x, y, z;
  __host__ __device__ dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef struct ihipStream_t* hipStream_t;
typedef enum hipError_t { hipSuccess = 0 } hipError_t;
extern "C" hipError_t hipGetLastError(void);
extern "C" const char* hipGetErrorString(hipError_t);
extern "C" int __hipPushCallConfiguration(dim3, dim3, size_t, hipStream_t);
extern "C" int __hipPopCallConfiguration(dim3*, dim3*, size_t*, hipStream_t*);
extern "C" hipError_t hipLaunchKernel(const void*, dim3, dim3, void**, size_t, hipStream_t);
typedef enum hipDeviceAttribute_t { hipDeviceAttributeMultiprocessorCount = 63 } hipDeviceAttribute_t;
extern "C" hipError_t hipGetDevice(int*);
extern "C" hipError_t hipDeviceGetAttribute(int*, hipDeviceAttribute_t, int);
extern "C" hipError_t hipMallocAsync(void**, size_t, hipStream_t);
extern "C" hipError_t hipFreeAsync(void*, hipStream_t);
__device__ inline unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
__device__ inline float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
#define hipLaunchKernelGGL(k, g, b, s, st, ...) k<<<(g), (b), (s), (st)>>>(__VA_ARGS__)
"""


@pytest.mark.slow  # a host C++ build against the HIP stub (clang-19)
def test_host_part_type_checks_against_hip_stub(tmp_path):
    """Host + device compile of the whole TU (host launcher included) against a minimal hip_runtime.h.
    Real ROCm hipcc is still the authority; this catches host-side mistakes without it."""
    (tmp_path / "hip").mkdir()
    (tmp_path / "hip" / "hip_runtime.h").write_text(_HIP_STUB)
    obj = tmp_path / "full.o"
    proc = subprocess.run(
        [
            CLANG,
            "-x",
            "hip",
            "--offload-arch=gfx942",
            "-nogpulib",
            "-nogpuinc",
            "-isystem",
            str(tmp_path),
            "-O3",
            "-std=c++17",
            "-Ikernel",
            "-fPIC",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-c",
            str(SOURCE.relative_to(ROOT)),
            "-o",
            str(obj),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    syms = subprocess.run(
        [shutil.which("llvm-nm-19") or "nm", str(obj)], capture_output=True, text=True
    ).stdout
    for fn in ("ra_attention_fwd", "ra_plan_launch", "ra_validate", "ra_backend_name", "ra_build_info"):
        assert re.search(rf" T {fn}$", syms, re.M), f"{fn} not exported"
    blob = obj.read_bytes()
    m = re.search(rb'\{"backend":"hip"[^\x00]*\}', blob)
    assert m, "ra_build_info JSON not found"
    import json

    info = json.loads(m.group(0))
    assert info["backend"] == "hip" and info["abi"] == 2 and info["arch"] == "gfx942"
    # kernel/hip/parts/flags.h: a build without -D compiles every flag at its table default.
    flags = {k: v for k, v in info.items() if f"{k}_default" in info}
    assert flags == {"mfma_builtin": 0, "force_compat": 0, "row_resources": 0}
    assert all(info[f"{k}_default"] == v for k, v in flags.items())
    assert info["design_step"] == 13
    assert info["inject"] == {
        "slowdown_pct": 0,
        "ulp": 0,
        "nondeterminism": 0,
        "hang_sq": 0,
        "crash_sq": 0,
        "round_swap": 0,
    }


def test_the_host_part_compiles_against_the_hip_runtime_declarations(tmp_path: Path) -> None:
    """ROCm is not installed here, so no build compiles ra_attention_fwd's host part (RA_HIP_HAVE_RUNTIME);
    this checks it against the HIP declarations it uses (tests/kernel/hip_host_decls, -fsyntax-only):
    a misspelt name or a wrong type in the launch code fails here, not first on an MI300X."""
    decls = Path(__file__).parent / "hip_host_decls"
    argv = [CLANG, "-x", "hip", "--offload-arch=gfx942", "-nogpulib", "-nogpuinc", "--cuda-host-only"]
    argv += ["-fsyntax-only", "-std=c++17", "-Werror", f"-I{decls}"]
    done = subprocess.run([*argv, str(SOURCE)], capture_output=True, text=True)  # type: ignore[list-item]
    assert done.returncode == 0, done.stderr
    planted = tmp_path / "planted.hip"  # the same file with one name misspelt: the check must see it
    text = SOURCE.read_text().replace(
        "const ra_attention_params* p = &view;", "const ra_attention_params* p = &v1ew;"
    )
    assert text != SOURCE.read_text()
    planted.write_text(text)
    bad = subprocess.run([*argv, f"-I{SOURCE.parent}", str(planted)], capture_output=True, text=True)  # type: ignore[list-item]
    assert bad.returncode != 0 and "v1ew" in bad.stderr
