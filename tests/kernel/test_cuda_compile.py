"""Compile-only proof of the CUDA sm_90a backend (kernel/cuda/attention_sm90.cu).

No GPU is needed: nvcc builds the library exactly as the build module does, and the tests read
ptxas' resource report (-Xptxas -v) and, where cuobjdump is installed, the SASS. What runs on the
device (numerics, fire drills, speed, sanitizers, ncu) is benchmarks/h200/h200_op.sh's job, through the
package; docs/perf-notes.md has its figures.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from regress.native.build import build_kernel, parse_ptxas

ROOT = Path(__file__).resolve().parents[2]
NVCC = shutil.which("nvcc")

pytestmark = [
    pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: cannot compile the sm_90a library"),
    pytest.mark.slow,  # each nvcc build of the sm_90a library takes minutes of CPU
]

MODES = 3
LAYOUTS = 2
SCHEDULES = 2  # sm90: next tile's Q K^T beside the last P.V or not (by seqlen_k); no ping-pong variant
MERGES = MODES  # attn_merge_splits, one per rounding mode (the split over keys, split.cuh)
IN_KERNEL_MERGES = MODES * LAYOUTS  # attn_fwd_sm90<..., kMerge = true>: decode's splits merged in the kernel
# attn_fwd_sm90's kMerge in the mangled name (the argument before the last, kDyn: RA_CUDA_DYN_SCHED)
IN_KERNEL_MERGE = re.compile(r"Lb[01]ELb[01]ELb[01]ELb1ELb[01]EE")
# attn_fwd_sm90<..., kDyn = true>: the dynamic tile scheduler (RA_CUDA_DYN_SCHED=1, the default)
DYN_KERNELS = MODES * LAYOUTS
DYN_KERNEL = re.compile(r"Lb[01]ELb[01]ELb[01]ELb[01]ELb1EE")
# attn_fwd_sm90_long (RA_CUDA_LONG_BLOCK_N=160, the default: long keys in blocks of 160) and
# attn_fwd_sm90_tail (RA_CUDA_TAIL_SPLIT=1, the default: the last partial round split over keys)
# attn_fwd_sm90_short (RA_CUDA_SHORT_BLOCK_N=80, the default: seqlen_k <= 80 in one block of 80)
LONG_KERNELS = TAIL_KERNELS = SHORT_KERNELS = MODES * LAYOUTS
LONG_N_DEFAULT = 160
SHORT_N_DEFAULT = 80
SM90 = (
    MODES * LAYOUTS * SCHEDULES + IN_KERNEL_MERGES + DYN_KERNELS + LONG_KERNELS + TAIL_KERNELS + SHORT_KERNELS
)
# ABI v2 (issue 40, mainloop_v2.cuh): attn_fwd_sm90_v2<kRound, Mask, Seq, kPack>, strided layout only;
# the mask's alignment (top-left, bottom-right) is a runtime flag, not an instance
V2_MASKS = ("NoMask", "CausalMask")
V2_SEQS = ("FixedSeq", "VarSeq")  # a dense batch, or packed sequences (cu_seqlens)
V2_PACKS = 2  # kPack: a tile of one head's 128 rows, or GQA's query heads packed into one tile
V2_KERNELS = MODES * len(V2_MASKS) * len(V2_SEQS) * V2_PACKS
V2_KERNEL = re.compile(r"attn_fwd_sm90_v2ILi(\d)ENS_\d+(\w+?)ENS_\d+(\w+?)ELb([01])E")
# attn_varlen_tiles<Mask, kPack> (seqlen.cuh): varlen's pre-pass, one CTA that writes the tile list
# into the workspace; no rounding mode and no output, so no fault of a drill build reaches it
VARLEN_PREP = "attn_varlen_tiles"
VARLEN_PREP_KERNEL = re.compile(r"attn_varlen_tilesINS_\d+(\w+?)ELb([01])E")
VARLEN_PREPS = len(V2_MASKS) * V2_PACKS
KERNELS = SM90 + MODES * LAYOUTS + MERGES + V2_KERNELS + VARLEN_PREPS  # + mma.sync, merges, v2, pre-passes
ROUNDED = KERNELS - VARLEN_PREPS  # the kernels with a rounding mode template parameter
ABI_SYMBOLS = {"ra_attention_fwd", "ra_validate", "ra_backend_name", "ra_build_info", "ra_plan_launch"}

INJECT = {"slowdown_pct": 25, "ulp": 1, "nondeterminism": 1}


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


def kernels(log: str) -> dict[str, dict[str, int]]:
    """Per-kernel resources, read by the product's own ptxas parser (what `regress build` stores)."""
    return parse_ptxas(log).get("kernels", {})


def build(out: Path, inject: dict[str, int] | None = None, flags: tuple[str, ...] = ()) -> tuple[Path, str]:
    """Builds through the project's one build path (regress.native.build), so the checks below hold for
    exactly what `regress build --backend cuda [--inject ...]` produces (`flags`: -DRA_CUDA_... build
    flags); returns the library and ptxas' log. The stats the build stored are the product parser's
    reading of that log."""
    art = build_kernel("cuda", inject=inject, cache_dir=out, extra_flags=flags)
    log = (art.path.parent / "build.log").read_text()
    assert art.stats == parse_ptxas(log)
    assert art.inject == (inject or {})
    return art.path, log


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda"))


@pytest.fixture(scope="module")
def injected(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda-inject"), INJECT)


def _v2(name: str) -> tuple[int, str, str, int] | None:
    """attn_fwd_sm90_v2's (rounding mode, mask, lengths, packed) from its mangled name."""
    m = V2_KERNEL.search(name)
    return (int(m.group(1)), m.group(2), m.group(3), int(m.group(4))) if m else None


def test_every_kernel_is_reported(built):
    found = kernels(built[1])
    v2 = [k for k in found if "attn_fwd_sm90_v2" in k]
    prep = [k for k in found if VARLEN_PREP in k]
    sm90 = [k for k in found if "attn_fwd_sm90" in k and k not in v2]
    mma = [k for k in found if "attn_fwd_mma_sync" in k]
    merge = [k for k in found if "attn_merge_splits" in k]
    assert len(sm90) == SM90, found.keys()
    assert sum(1 for k in sm90 if IN_KERNEL_MERGE.search(k)) == IN_KERNEL_MERGES, found.keys()
    assert sum(1 for k in sm90 if DYN_KERNEL.search(k)) == DYN_KERNELS, found.keys()
    assert sum(1 for k in sm90 if "attn_fwd_sm90_long" in k) == LONG_KERNELS, found.keys()
    assert sum(1 for k in sm90 if "attn_fwd_sm90_tail" in k) == TAIL_KERNELS, found.keys()
    assert sum(1 for k in sm90 if "attn_fwd_sm90_short" in k) == SHORT_KERNELS, found.keys()
    assert len(mma) == MODES * LAYOUTS, found.keys()
    assert len(merge) == MERGES, found.keys()
    # each (mode, mask, lengths, packing) once; each pre-pass (mask, packing) once
    want = {(r, m, q, k) for r in range(MODES) for m in V2_MASKS for q in V2_SEQS for k in range(V2_PACKS)}
    assert len(v2) == len(want) == V2_KERNELS and set(map(_v2, v2)) == want, v2
    preps = [m.groups() for k in prep if (m := VARLEN_PREP_KERNEL.search(k))]
    assert sorted(preps) == sorted((m, str(k)) for m in V2_MASKS for k in range(V2_PACKS)), prep
    assert len(found) == len(sm90) + len(mma) + len(merge) + len(v2) + len(prep) == KERNELS, found.keys()
    # the parameter block each kernel takes, by its mangled signature: the dense kernels FwdParams (the
    # block of before ABI v2), the v2 kernels and the varlen pre-pass FwdParamsV2 (params.cuh)
    assert all(k.endswith("EEvNS_9FwdParamsE") for k in sm90 + mma + merge), found.keys()
    assert all(k.endswith("EEvNS_11FwdParamsV2E") for k in v2 + prep), found.keys()


def test_no_spills_no_stack(built):
    for name, r in kernels(built[1]).items():
        assert r.get("stack_bytes") == 0, f"{name}: {r}"
        assert r.get("spill_store_bytes") == 0 and r.get("spill_load_bytes") == 0, f"{name}: {r}"


def test_register_budget(built):
    """The warp-specialised kernel runs 384 threads, one CTA per SM: 65536 / 384 -> 168 at entry
    (setmaxnreg then moves 40 -> producer, 232 -> consumers)."""
    for name, r in kernels(built[1]).items():
        if "attn_fwd_sm90" in name:
            assert r["registers"] <= 168, f"{name}: {r}"


def test_wgmma_not_serialized(built):
    # ptxas says so (C7515 and family) when it must serialise wgmma for register hazards; C7517 says
    # it injected a wait for registers still in flight (an overlap lost). C7519 (an injected
    # warpgroup.arrive, a register fence) is allowed.
    assert "serialized" not in built[1], built[1]
    assert "(C7517)" not in built[1], built[1]


def test_inject_builds_compile(injected):
    """A fire-drill build with every fault on compiles every kernel, without spills."""
    found = kernels(injected[1])
    assert len(found) == KERNELS, found.keys()
    for name, r in found.items():
        assert r.get("spill_store_bytes") == 0 and r.get("stack_bytes") == 0, f"{name}: {r}"


def _build_info(lib: Path) -> dict[str, object]:
    """ra_build_info()'s JSON, read from the library's bytes (loading it would need the driver)."""
    m = re.search(rb'\{"backend":"cuda".*?"inject":\{[^}]*\}[^\x00]*\}', lib.read_bytes())
    assert m, "ra_build_info's string is not in the library"
    return json.loads(m.group(0))


def test_injected_fault_is_reported(built, injected):
    """The fault macros reach the compile: the library reports exactly the injected values (what
    `regress build` records and a drill's bundle carries), the clean one none."""
    # hang_sq and crash_sq (the watchdog and worker-loss drills) are reported too, 0 when not drilled
    assert _build_info(injected[0])["inject"] == {**INJECT, "hang_sq": 0, "crash_sq": 0, "round_swap": 0}
    assert _build_info(built[0])["inject"] == dict.fromkeys([*INJECT, "hang_sq", "crash_sq", "round_swap"], 0)


def test_injected_fault_is_in_the_device_code(built, injected):
    """Every kernel's SASS differs from the clean build's: the fault is compiled into the device
    code, not only into the build-info string (the ULP fault moves every output in the epilogue).
    Varlen's pre-pass is the exception: it writes only the tile list (test_sass_tensor_cores_and_no_
    local_memory holds it to that), and the slowdown drill times the tiles of the kernel after it."""
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip("cuobjdump/nvdisasm not found (test extras: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)")
    clean, faulty = _sass(built[0], cuobjdump, nvdisasm), _sass(injected[0], cuobjdump, nvdisasm)
    assert clean.keys() == faulty.keys()
    outputs = [name for name in clean if VARLEN_PREP not in name]
    assert len(outputs) == KERNELS - VARLEN_PREPS, outputs
    same = [name for name in outputs if clean[name] == faulty[name]]
    assert not same, f"no fault in the device code of {same}"


@pytest.fixture(scope="module")
def swapped(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda-swap"), {"round_swap": 5})


def test_rounding_swap_is_in_the_device_code(built, swapped):
    """`--inject swap_rounding=rtne:rtz` on CUDA (its run is the device nightly's, where the directed
    rounding cases fail on it): reported in the build info, and compiled into the device code as a
    permutation: the drill build's kernels are the clean build's SASS bodies, the rtne and rtz ones
    traded (2 of every 3 kernels with a rounding mode move), the rtna ones and varlen's pre-pass
    (no rounding mode) untouched."""
    assert _build_info(swapped[0])["inject"]["round_swap"] == 5
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip("cuobjdump/nvdisasm not found (test extras: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)")
    clean, drill = _sass(built[0], cuobjdump, nvdisasm), _sass(swapped[0], cuobjdump, nvdisasm)
    assert clean.keys() == drill.keys()
    assert sorted(clean.values()) == sorted(drill.values())
    moved = [name for name in clean if clean[name] != drill[name]]
    assert len(clean) == KERNELS and len(moved) == 2 * ROUNDED // MODES, moved
    assert not [name for name in moved if VARLEN_PREP in name], moved


def _exported_ra(lib: Path) -> set[str]:
    """The library's defined dynamic symbols that start with ra_ (nm -D)."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not installed: cannot list the library's dynamic symbols")
    out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return {
        line.split()[-1]
        for line in out.stdout.splitlines()
        if line.split() and line.split()[-1].startswith("ra_")
    }


def test_exports_exactly_the_abi(built):
    ra = _exported_ra(built[0])
    assert ra == ABI_SYMBOLS


def test_the_library_plans_as_the_host_planner_does(built):
    """The CUDA library's ra_plan_launch and build flags are plan_host.cpp's (the same plan.h and
    flags.def): loaded without a GPU (libcudart resolves; no device call is made)."""
    import ctypes

    sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
    import cuda_plan as cp

    lib = ctypes.CDLL(str(built[0]))
    lib.ra_build_info.restype = ctypes.c_char_p
    info = json.loads(lib.ra_build_info())
    host = cp.build_info()
    flags = {k: v for k, v in host.items() if k not in ("planner_only", "backend", "abi")}
    assert {k: info[k] for k in flags} == flags
    for shape in (
        (1, 32, 1, 8192),
        (256, 32, 128, 128),
        (2, 40, 1024, 77),
        (1, 200, 100, 2000),
        (4, 16, 4096, 4097),
    ):
        out = cp.LaunchPlanC()
        err = ctypes.create_string_buffer(256)
        p = cp.params(*shape)
        facts = cp.DeviceFactsC(cp.H200_SMS, 0)
        assert lib.ra_plan_launch(ctypes.byref(p), ctypes.byref(facts), ctypes.byref(out), err, 256) == 0, (
            err.value
        )
        assert out.kind.decode() == cp.plan(*shape)["kind"], shape
        assert {n: getattr(out, n) for n, _ in cp.LaunchPlanC._fields_ if n not in ("kind", "grid")} == {
            n: v for n, v in cp.plan(*shape).items() if n not in ("kind", "grid")
        }


def test_sass_tensor_cores_and_no_local_memory(built):
    cuobjdump = find_tool("cuobjdump")
    nvdisasm = find_tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip(
            "cuobjdump/nvdisasm not found (pip packages nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm "
            "provide them): SASS not checked"
        )
    funcs = _sass(built[0], cuobjdump, nvdisasm)
    assert len(funcs) == KERNELS, list(funcs)
    for name, body in funcs.items():
        assert not re.search(r"\b(LDL|STL)\b", body), f"{name} uses local memory"
        if "attn_fwd_sm90_long" in name:
            # Q K^T over key blocks of 160: 8 k-steps at its 4 sites; P V: 160 / 16 k-steps at 2 sites;
            # the main plan's staged TMA-store epilogue; unsplit only: no partials, no atomics
            assert len(re.findall(rf"\bHGMMA\.64x{LONG_N_DEFAULT}x16\.F32\.BF16\b", body)) == 32, name
            assert len(re.findall(r"\bHGMMA\.64x128x16\.F32\.BF16\b", body)) == 2 * LONG_N_DEFAULT // 16, name
            assert len(re.findall(r"\bSTSM\.16\.M88\.4\b", body)) == 8, name
            assert len(re.findall(r"\bUTMASTG\.4D\b", body)) == 2, name
            assert not re.search(r"\b(ST|LD)\.E\b|\bATOMG\b|\bSTG\.E\.64\b", body), name
        elif "attn_fwd_sm90_short" in name:
            # Q K^T over one block of 80 keys: 8 k-steps at its 4 sites; P V: 80 / 16 k-steps at 2
            # sites; the staged TMA-store epilogue; unsplit, static order: no partials, no atomics
            assert len(re.findall(rf"\bHGMMA\.64x{SHORT_N_DEFAULT}x16\.F32\.BF16\b", body)) == 32, name
            assert len(re.findall(r"\bHGMMA\.64x128x16\.F32\.BF16\b", body)) == 2 * SHORT_N_DEFAULT // 16, (
                name
            )
            assert len(re.findall(r"\bSTSM\.16\.M88\.4\b", body)) == 8, name
            assert len(re.findall(r"\bUTMASTG\.4D\b", body)) == 2, name
            assert not re.search(r"\b(ST|LD)\.E\b|\bATOMG\b|\bSTG\.E\.64\b", body), name
        elif "attn_fwd_sm90_tail" in name:
            # the main plan's tile code; a tail part's partials (34 8-byte stores), the last part's
            # merge of them (34 8-byte loads) and its arrival count and reset (2 atomics)
            assert len(re.findall(r"\bHGMMA\.64x128x16\.F32\.BF16\b", body)) == 48, name
            assert len(re.findall(r"\bSTSM\.16\.M88\.4\b", body)) == 8, name
            assert len(re.findall(r"\bUTMASTG\.4D\b", body)) == 2, name
            assert len(re.findall(r"\bSTG\.E\.64\b", body)) == 34, name
            assert len(re.findall(r"\bLDG\.E\.64\b", body)) == 34, name
            assert len(re.findall(r"\bATOMG\b", body)) == 2, name
            assert not re.search(r"\b(ST|LD)\.E\b", body), name
        elif v2 := _v2(name):
            _, mask, seq, pack = v2
            tma_rows, by_rows = not pack, bool(pack) or seq == "VarSeq"  # the epilogue's paths
            # a causal kernel's second key loop, for a staircase V with a non-finite element
            # (RA_CUDA_STAIR_EXACT=1, the default: test_stair_exact_build)
            stair = mask == "CausalMask"
            # 8 k-steps x (Q K^T of the first tile, of the key loop, of the next tile after the
            # epilogue; P V of the key loop and of the last block); the second loop's 3 sites
            assert len(re.findall(r"\bHGMMA\.64x128x16\.F32\.BF16\b", body)) == 40 + 24 * stair, name
            # 8 stmatrix into the warp's staging per epilogue path (TMA boxes where 16 rows of one head
            # fit, row by row where a box would cross a sequence's end or mix packed heads)
            assert len(re.findall(r"\bSTSM\.16\.M88\.4\b", body)) == 8 * (tma_rows + by_rows), name
            assert len(re.findall(r"\bUTMASTG\.4D\b", body)) == 2 * tma_rows, name
            # the row path: each lane's 8 16-byte chunks, read back from the staging through a generic
            # address (LD.E.128) and stored to global memory (STG.E.128)
            assert len(re.findall(r"\bSTG\.E\.128\b", body)) == 8 * by_rows, name
            assert len(re.findall(r"\bLD\.E\.128\b", body)) == 8 * by_rows, name
            # the only generic store: the last block's zeroed V rows (causal or varlen, mask.cuh's
            # RowMask), one 16-byte store a loop step, in each key loop; no other generic access
            zero_v = (mask == "CausalMask" or seq == "VarSeq") + stair
            assert len(re.findall(r"\bST\.E\.128\b", body)) == zero_v, name
            assert len(re.findall(r"\b(ST|LD)\.E\b", body)) == 8 * by_rows + zero_v, name
            # the LSE (2 rows a thread); the dynamic tile counter's 4 atomics, as in the dense dynamic
            # kernels (one more where the staircase vote's producer may take its next tile early);
            # never split over keys, so no partials
            assert len(re.findall(r"\bSTG\.E\s", body)) == 2, name
            assert len(re.findall(r"\bATOMG\b", body)) == 4 + stair, name
            assert not re.search(r"\b(STG|LDG)\.E\.64\b", body), name
        elif "attn_fwd_sm90" in name:
            # 8 k-steps x (Q K^T of the first tile, of an idle warpgroup's next tile, of the key
            # loop and of the next tile beside the last P V; P V of the key loop and of the last block)
            assert len(re.findall(r"\bHGMMA\.64x128x16\.F32\.BF16\b", body)) == 48, name
            # the epilogue: 8 stmatrix into the warp's swizzled staging, 2 TMA stores from it, and
            # no generic-address load or store (the v3 staging lost the shared space: ST.E, LD.E)
            assert len(re.findall(r"\bSTSM\.16\.M88\.4\b", body)) == 8, name
            assert len(re.findall(r"\bUTMASTG\.4D\b", body)) == 2, name
            assert not re.search(r"\b(ST|LD)\.E\b", body), name
            # a split tile's partials: per row 16 float2 of O and one (max, sum), 2 rows a thread;
            # a second kernel merges them (no atomics here), except in the decode instantiation,
            # where the last split's warpgroup counts arrivals and merges (+ its bf16 row store),
            # and the dynamic scheduler's, whose producer takes tiles from a counter: 4 atomics
            # (the next tile, its count of done CTAs, the last CTA's 2 resets)
            stores = len(re.findall(r"\bSTG\.E\.64\b", body))
            atomics = len(re.findall(r"\bATOMG\b", body))
            if IN_KERNEL_MERGE.search(name):
                assert stores == 35 and atomics, (name, stores)
                assert re.search(r"\bLDG\.E\.128\b", body), name
            elif DYN_KERNEL.search(name):
                assert stores == 34 and atomics == 4, (name, stores, atomics)
            else:
                assert stores == 34 and not atomics, (name, stores)
        elif "attn_merge_splits" in name:
            # 16-byte partial loads, 8-byte bf16 stores, exp2 on the MUFU; global, never generic
            assert re.search(r"\bLDG\.E\.128\b", body) and re.search(r"\bSTG\.E\.64\b", body), name
            assert re.search(r"\bMUFU\.EX2\b", body), name
            assert not re.search(r"\b(ST|LD)\.E\b", body), name
        elif VARLEN_PREP in name:
            # the tile list only: its global stores are an entry's two 16-byte halves and the count
            # (0 when cu_seqlens fail, else the total); no tensor cores, no rounding, no output
            stores = re.findall(r"\bSTG\.E\S*", body)
            assert sorted(stores) == ["STG.E", "STG.E", "STG.E.128", "STG.E.128"], (name, stores)
            assert not re.search(r"\b(HGMMA|HMMA|ATOMG|STSM|UTMASTG|F2FP)\b|\b(ST|LD)\.E\b", body), name
        else:
            assert re.search(r"\bHMMA\.16816\.F32\.BF16\b", body), name


LONG_N = 176  # -DRA_CUDA_LONG_BLOCK_N: the long-key kernel's key block (mainloop_sm90.cuh's LongPlan)


@pytest.fixture(scope="module")
def long_built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda-long"), flags=(f"-DRA_CUDA_LONG_BLOCK_N={LONG_N}",))


def test_long_block_build(built, long_built):
    """The long-key ablation of 176 keys a block (FlashAttention-3's, no staging) changes only the
    long-key kernels (one per mode and layout), each without spills or serialised wgmma, and leaves
    every other kernel as the default build compiles it (its SASS)."""
    found = kernels(long_built[1])
    long = [k for k in found if "attn_fwd_sm90_long" in k]
    assert len(long) == MODES * LAYOUTS, found.keys()
    assert set(found) == set(kernels(built[1]))
    for name in long:
        r = found[name]
        assert r["registers"] <= 168 and r.get("stack_bytes") == 0, f"{name}: {r}"
        assert r.get("spill_store_bytes") == 0 and r.get("spill_load_bytes") == 0, f"{name}: {r}"
    assert "serialized" not in long_built[1] and "(C7517)" not in long_built[1], long_built[1]
    assert _build_info(long_built[0])["long_block_n"] == LONG_N
    assert _build_info(built[0])["long_block_n"] == LONG_N_DEFAULT
    assert _build_info(built[0])["short_block_n"] == SHORT_N_DEFAULT
    assert _build_info(built[0])["short_q_stages"] == 3
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip("cuobjdump/nvdisasm not found (test extras: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)")
    clean, lb = _sass(built[0], cuobjdump, nvdisasm), _sass(long_built[0], cuobjdump, nvdisasm)

    def words(body: str) -> str:  # the dump's column padding follows its longest line
        return " ".join(body.split())

    assert {n: words(b) for n, b in lb.items() if n not in long} == {
        n: words(b) for n, b in clean.items() if n not in long
    }
    for name in long:
        body = lb[name]
        assert not re.search(r"\b(LDL|STL)\b", body), f"{name} uses local memory"
        # Q K^T: 8 k-steps at each of its 4 sites (see test_sass_tensor_cores_and_no_local_memory);
        # P V: N / 16 k-steps at 2 sites
        assert len(re.findall(rf"\bHGMMA\.64x{LONG_N}x16\.F32\.BF16\b", body)) == 32, name
        assert len(re.findall(r"\bHGMMA\.64x128x16\.F32\.BF16\b", body)) == 2 * LONG_N // 16, name
        assert not re.search(r"\bATOMG\b", body), name  # unsplit only: no partials, no merge


def _sass(lib: Path, cuobjdump: str, nvdisasm: str) -> dict[str, str]:
    """Kernel name -> its SASS, addresses stripped so two builds compare by instructions."""
    env = dict(os.environ, PATH=str(Path(nvdisasm).parent) + os.pathsep + os.environ.get("PATH", ""))
    sass = subprocess.run(
        [cuobjdump, "--dump-sass", str(lib)], capture_output=True, text=True, env=env, check=True
    ).stdout
    funcs: dict[str, list[str]] = {}
    cur = None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
        elif cur is not None:
            cur.append(re.sub(r"/\*[0-9a-f]{4,}\*/", "", line).strip())
    return {name: "\n".join(lines) for name, lines in funcs.items()}


def _overlap_segments(body: str) -> list[tuple[int, int]]:
    """(exponentials between a wait that leaves one wgmma group in flight and the next wait for all,
    exponentials after that wait before the next wgmma issue), per such wait in the key loop."""
    ins = body.splitlines()
    out = []
    for i, line in enumerate(ins):
        if "WARPGROUP.DEPBAR.LE gsb0, 0x1" not in line:
            continue
        j = next((k for k in range(i + 1, len(ins)) if "WARPGROUP.DEPBAR" in ins[k]), None)
        if j is None or "0x0" not in ins[j]:
            continue
        k = next((k for k in range(j + 1, len(ins)) if "WARPGROUP.ARRIVE" in ins[k]), len(ins))
        out.append((sum("MUFU.EX2" in x for x in ins[i:j]), sum("MUFU.EX2" in x for x in ins[j:k])))
    return out


def _key_loops(body: str) -> list[Counter[str]]:
    """The opcode counts of each loop (a backward branch) holding 16 HGMMA, a key loop's Q K^T and
    P V of one block: cuobjdump lists every 16-byte instruction from offset 0, so an instruction's
    index gives its address."""
    ins = [line for line in body.splitlines() if line.endswith("*/") and ";" in line]
    ops = [(t[1] if t[0].startswith("@") else t[0]).split(".")[0] for t in (x.split() for x in ins)]
    loops = []
    for i, line in enumerate(ins):
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", line)
        if m and (j := int(m.group(1), 16) // 16) < i and ops[j : i + 1].count("HGMMA") == 16:
            loops.append(Counter(ops[j : i + 1]))
    return loops


def _vector_gap(a: Counter[str], b: Counter[str]) -> int:
    """How many instructions off the uniform datapath (no U* opcode, no R2UR) two loops differ by."""
    return sum(abs(a[o] - b[o]) for o in a | b if not o.startswith("U") and o != "R2UR")


def test_softmax_runs_beside_the_products(built):
    """The overlap the key loop exists for is the compiler's to keep: between the wait for S (one
    product still in flight) and the wait for that product, the block's exponentials; after the
    wait, none before the next issue. ptxas once scheduled the split P.V's first-half exponentials
    past the wait (docs/perf-notes.md v15): such a build gives the same bits, so no numerical check
    can tell that the overlap is gone. A toolchain that does it again fails here."""
    cuobjdump = find_tool("cuobjdump")
    nvdisasm = find_tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    funcs = _sass(built[0], cuobjdump, nvdisasm)
    checked = 0
    for name, body in funcs.items():
        if "attn_fwd_sm90" not in name:  # the dense kernels and v2's (the same key loop, blocks_split_pv)
            continue
        segs = _overlap_segments(body)
        loop = [s for s in segs if s[0] > 0]
        assert loop, f"{name}: no exponentials beside an in-flight product: {segs}"
        for inside, after in loop:
            # at least one row pair's first half of column tiles (16 at the 80-key block)
            assert inside >= 16 and after == 0, f"{name}: {inside} exponentials beside, {after} after"
        checked += 1
    assert checked == SM90 + V2_KERNELS, checked


@pytest.fixture(scope="module")
def trace_built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda-trace"), flags=("-DRA_CUDA_TRACE=1",))


def test_trace_build(built, trace_built):
    """-DRA_CUDA_TRACE=1 (trace.cuh; benchmarks/h200/h200_byte_floor.py --trace) adds its reader to the
    library's exports and its clock reads to every kernel, without spills or serialised wgmma; the
    default build exports exactly the ABI (test_exports_exactly_the_abi) and says trace 0."""
    assert _exported_ra(trace_built[0]) == ABI_SYMBOLS | {"ra_cuda_trace_read"}
    found = kernels(trace_built[1])
    assert set(found) == set(kernels(built[1]))
    for name, r in found.items():
        assert r.get("spill_store_bytes") == 0 and r.get("stack_bytes") == 0, f"{name}: {r}"
    assert "serialized" not in trace_built[1] and "(C7517)" not in trace_built[1]
    assert _build_info(trace_built[0])["trace"] == 1 and _build_info(built[0])["trace"] == 0


@pytest.fixture(scope="module")
def no_rows_built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda-no-gqa-rows"), flags=("-DRA_CUDA_GQA_ROWS=0",))


def test_gqa_rows_flag_changes_the_host_side_only(built, no_rows_built):
    """RA_CUDA_GQA_ROWS (kernel/common/gqa_rows.h through plan.h's call_view; 1 by default) changes no
    kernel: the -DRA_CUDA_GQA_ROWS=0 build compiles, exports the ABI, says gqa_rows 0 (the default 1),
    keeps every kernel's SASS, and its ra_plan_launch plans a GQA decode on v2 where the default
    library runs it as the dense call (split, merged in the kernel), as the host planner of each build
    does (loaded without a GPU, as in the test above)."""
    import ctypes

    sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
    import cuda_plan as cp

    from regress.native.plan import shape_params

    assert _exported_ra(no_rows_built[0]) == ABI_SYMBOLS
    assert _build_info(no_rows_built[0])["gqa_rows"] == 0 and _build_info(built[0])["gqa_rows"] == 1
    assert set(kernels(no_rows_built[1])) == set(kernels(built[1]))
    decode = shape_params(1, 32, 1, 8192, heads_kv=8, mask="causal_bottom_right")
    for lib_path, flags, kind in (
        (built[0], (), "sm90_merge_in_kernel"),
        (no_rows_built[0], ("-DRA_CUDA_GQA_ROWS=0",), "sm90_v2_packgqa_causal"),
    ):
        lib = ctypes.CDLL(str(lib_path))
        out = cp.LaunchPlanC()
        err = ctypes.create_string_buffer(256)
        facts = cp.DeviceFactsC(cp.H200_SMS, 0)
        assert lib.ra_plan_launch(ctypes.byref(decode), ctypes.byref(facts), ctypes.byref(out), err, 256) == 0
        got = {n: getattr(out, n) for n, _ in cp.LaunchPlanC._fields_ if n != "grid"}
        got["kind"], got["grid"] = out.kind.decode(), list(out.grid)
        assert got == cp.plan_of(decode, flags=flags) and got["kind"] == kind, got
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip("cuobjdump/nvdisasm not found (test extras: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)")
    assert _sass(no_rows_built[0], cuobjdump, nvdisasm) == _sass(built[0], cuobjdump, nvdisasm)


@pytest.fixture(scope="module")
def gap_built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cuda-gap"), flags=("-DRA_CUDA_STAIR_EXACT=0",))


def test_stair_exact_build(built, gap_built):
    """RA_CUDA_STAIR_EXACT=1, the default since 2026-12-06 (kernel/cuda/stair.cuh: the causal
    diagonal's non-finite V kept exact), compiles every kernel without spills, stack or serialised
    wgmma and says stair_exact 1 (the gap build, =0, says 0). Against the gap build it changes the
    causal v2 kernels only: every other kernel keeps its SASS, and each causal one gains the vote
    warps' pass (4 loads in flight, in the producer warpgroup: the consumers load nothing for the vote
    and wait at no barrier reduction), the second key loop's 24 HGMMA (its Q K^T and two P V sites)
    and its shared-memory zeroing, with no local memory; both key loops keep the softmax beside the
    products."""
    stair_built = built
    found = kernels(stair_built[1])
    assert set(found) == set(kernels(gap_built[1]))
    base = kernels(gap_built[1])
    for name, r in found.items():
        assert r.get("stack_bytes") == 0 and r.get("spill_store_bytes") == 0, f"{name}: {r}"
        assert r.get("spill_load_bytes") == 0, f"{name}: {r}"
        assert "CausalMask" in name or r == base[name], f"{name}: {r} (gap build: {base[name]})"
        assert "attn_fwd_sm90" not in name or r["registers"] <= 168, f"{name}: {r}"
    assert "serialized" not in stair_built[1] and "(C7517)" not in stair_built[1], stair_built[1]
    assert _build_info(stair_built[0])["stair_exact"] == 1 and _build_info(gap_built[0])["stair_exact"] == 0
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip("cuobjdump/nvdisasm not found (test extras: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)")
    clean, st = _sass(gap_built[0], cuobjdump, nvdisasm), _sass(stair_built[0], cuobjdump, nvdisasm)
    causal = {n for n in clean if (v := _v2(n)) and v[1] == "CausalMask"}
    assert len(causal) == MODES * len(V2_SEQS) * V2_PACKS

    def words(body: str) -> str:  # the dump's column padding follows its longest line
        return " ".join(body.split())

    assert {n: words(b) for n, b in st.items() if n not in causal} == {
        n: words(b) for n, b in clean.items() if n not in causal
    }
    for name in causal:
        body, base = st[name], clean[name]
        assert not re.search(r"\b(LDL|STL)\b", body), f"{name} uses local memory"
        # the vote runs in the producer warpgroup's warps 1-3: no barrier reduction in the consumers'
        # path (the per-tile vote there cost 0.92x the default at 2k even with its loads in flight, H100)
        assert not re.search(r"\bBAR\.RED\b", base) and not re.search(r"\bBAR\.RED\b", body), name
        # its pass: 4 loads in flight at once, no branch between them (a branch per load made ptxas
        # wait for each, 16 round trips a tile: 0.78x the default at 2k, H100); 6 spilled at 40 registers
        loads = [m.start() for m in re.finditer(r"\bLDG\.E\.128\.CONSTANT\b", body)]
        assert not re.search(r"\bLDG\.E\.128\.CONSTANT\b", base), name
        assert len(loads) == 4 and not re.search(r"\bBRA\b", body[loads[0] : loads[-1]]), name
        hgmma = r"\bHGMMA\.64x128x16\.F32\.BF16\b"
        assert len(re.findall(hgmma, body)) == len(re.findall(hgmma, base)) + 24, name
        # 16-byte shared stores: the zeroing's, one for the loop's blocks and one for the last, and the
        # producer's three sites that publish a TileInfo to the vote warps (first, early, late; two each)
        assert len(re.findall(r"\bSTS\.128\b", body)) == len(re.findall(r"\bSTS\.128\b", base)) + 2 + 6, name
        # both key loops keep the exponentials beside the product (test_softmax_runs_beside_the_products)
        loops = [seg for seg in _overlap_segments(body) if seg[0] > 0]
        assert len(loops) == 2 and all(inside >= 16 and after == 0 for inside, after in loops), (name, loops)
        # the all-finite tile's key loop is the default build's, uniform datapath included: a vote that
        # ptxas cannot see is uniform made both loops divergent code, their address arithmetic vector
        # ops and R2UR moves (88-92 more non-uniform instructions and 47 more R2UR a loop)
        fast = min(_key_loops(base), key=lambda c: c.total())
        best = min(_key_loops(body), key=lambda c, f=fast: _vector_gap(c, f))
        gap = _vector_gap(best, fast)
        assert gap <= 8 and best["R2UR"] <= fast["R2UR"] + 16, (name, gap, best["R2UR"], fast["R2UR"])
