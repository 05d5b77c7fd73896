"""The one build path for every kernel backend: the authority on how a kernel library is made.

`build_kernel("cpu" | "cuda" | "hip", ...)` runs the command in `COMMANDS` from the repository root,
records what went in (source hash, git commit, compiler and its version, the full argv, injected
faults) and what came out (artifact hash, the compiler's resource report), and caches the result
under `<cache_dir>/<backend>-<key>/` keyed by (source hash, argv, compiler version).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regress.facts import resources
from regress.facts.backends import BACKENDS

# The source root: the checkout, or the copy a wheel carries (regress/facts/resources.py).
REPO_ROOT = resources.source_root()
KERNEL_DIR = REPO_ROOT / "kernel"
OUT = "<out>"  # placeholder for the output path in COMMANDS and in the recorded flags
BUILD_JSON = "build.json"
SCHEMA = 1


@dataclass(frozen=True)
class Recipe:
    """How one backend is built. `argv[0]` is the compiler; `OUT` marks the output path."""

    argv: tuple[str, ...]
    source: str  # relative to the repository root
    dirs: tuple[str, ...]  # kernel/ subfolders whose files the backend uses (hashed)
    output: str  # file name of the artifact
    report: str  # which resource-report parser applies: "none", "ptxas", "amdgpu"


_COMMON = ("kernel/include", "kernel/common")

# The command table. Injected -D flags and extra_flags go in just before the source file.
COMMANDS: dict[str, Recipe] = {
    "cpu": Recipe(
        argv=(
            "g++",
            "-O3",
            "-std=c++17",
            "-fPIC",
            "-shared",
            "-pthread",
            "-fno-fast-math",
            "-ffp-contract=off",
            "-Ikernel",
            "kernel/cpu/attention_cpu.cpp",
            "-o",
            OUT,
        ),
        source="kernel/cpu/attention_cpu.cpp",
        dirs=(*_COMMON, "kernel/cpu"),
        output="libregress_attn_cpu.so",
        report="none",
    ),
    "cuda": Recipe(
        argv=(
            "nvcc",
            "-O3",
            "-std=c++17",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-lineinfo",
            "-Xptxas",
            "-v",
            "-Ikernel",
            "kernel/cuda/attention_sm90.cu",
            "-o",
            OUT,
        ),
        source="kernel/cuda/attention_sm90.cu",
        dirs=(*_COMMON, "kernel/cuda"),
        output="libregress_attn_cuda.so",
        report="ptxas",
    ),
    "hip": Recipe(
        # The remark flag only reports resource usage (registers, LDS, scratch); codegen is unchanged.
        argv=(
            "hipcc",
            "--offload-arch=gfx942",
            "-O3",
            "-std=c++17",
            "-shared",
            "-fPIC",
            "-Ikernel",
            "-Rpass-analysis=kernel-resource-usage",
            "kernel/hip/attention_gfx942.hip",
            "-o",
            OUT,
        ),
        source="kernel/hip/attention_gfx942.hip",
        dirs=(*_COMMON, "kernel/hip"),
        output="libregress_attn_hip.so",
        report="amdgpu",
    ),
    # Device code only, no ROCm needed: lets a machine without ROCm check that gfx942 code compiles
    # and read its register/LDS/scratch report.
    "hip-compile-only": Recipe(
        argv=(
            "clang-19",
            "-x",
            "hip",
            "--offload-arch=gfx942",
            "-nogpulib",
            "-nogpuinc",
            "--cuda-device-only",
            "--no-gpu-bundle-output",
            "-O3",
            "-std=c++17",
            "-Ikernel",
            "-Rpass-analysis=kernel-resource-usage",
            "-c",
            "kernel/hip/attention_gfx942.hip",
            "-o",
            OUT,
        ),
        source="kernel/hip/attention_gfx942.hip",
        dirs=(*_COMMON, "kernel/hip"),
        output="attention_gfx942.co",
        report="amdgpu",
    ),
}

# The host-only launch planners (issue 37): per GPU backend, its planner (kernel/<backend>/plan.h)
# as a small shared library made by the system C++ compiler, no GPU toolkit, so the emulator, the
# benchmarks, the tests and `regress plan` call the code the kernel launches from (regress/native/plan.py
# loads it). A backend whose source is missing says so when asked (BuildError).
PLANNER_SOURCES: dict[str, str] = {
    "hip": "kernel/hip/plan_host.cpp",
    "cuda": "kernel/cuda/plan_host.cpp",
}
PLANNERS: dict[str, Recipe] = {
    backend: Recipe(
        argv=("g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-Ikernel/include", src, "-o", OUT),
        source=src,
        dirs=(*_COMMON, f"kernel/{backend}"),
        output=f"libregress_plan_{backend}.so",
        report="none",
    )
    for backend, src in PLANNER_SOURCES.items()
}

# The torch operator (issue 40): kernel/torch/regress_op.cpp, the CPU/CUDA/autograd kernels of
# torch.ops.regress.* in C++, built by the system C++ compiler against the running torch's headers
# and libraries (no GPU toolkit: it reaches the device through torch's device-generic stream API and
# the kernel libraries through dlopen). Its argv names torch's version, location and C++ ABI, so a
# different torch is a different cache entry. regress/kernel/op_native.py loads it.
OP_SOURCE = "kernel/torch/regress_op.cpp"


def op_recipe() -> Recipe:
    """The operator library's recipe for the torch this process imports (C++20 from torch 2.13 on,
    whose headers require it; C++17 before, as torch.utils.cpp_extension of each version)."""
    import torch
    from torch.torch_version import TorchVersion

    root = Path(torch.__file__).resolve().parent
    std = "-std=c++20" if TorchVersion(torch.__version__) >= "2.13" else "-std=c++17"
    return Recipe(
        argv=(
            "g++",
            "-O2",
            std,
            "-fPIC",
            "-shared",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f'-DRA_TORCH_VERSION="{torch.__version__}"',
            "-Ikernel",
            "-isystem",
            str(root / "include"),
            OP_SOURCE,
            "-o",
            OUT,
            f"-L{root / 'lib'}",
            "-lc10",
            "-ltorch_cpu",
            f"-Wl,-rpath,{root / 'lib'}",
            "-ldl",
        ),
        source=OP_SOURCE,
        dirs=("kernel/include", "kernel/torch"),
        output="libregress_op.so",
        report="none",
    )


@dataclass(frozen=True)
class Drill:
    """One fire drill, the one statement of it: its `--inject NAME[=VALUE]`, the inject key a build
    records, the macro that turns it on (kernel/common/inject.h) and what it breaks."""

    name: str
    key: str
    macro: str
    value: str  # what VALUE reads as ("": none)
    breaks: str


DRILLS = (
    Drill("slowdown", "slowdown_pct", "RA_INJECT_SLOWDOWN_PCT", "PCT", "PCT % more work per block"),
    Drill("ulp", "ulp", "RA_INJECT_ULP", "N", "every finite non-zero output N ULPs away from zero"),
    Drill("nondeterminism", "nondeterminism", "RA_INJECT_NONDET", "", "odd launches flip one output bit"),
    Drill("hang", "hang_sq", "RA_INJECT_HANG_SQ", "SQ", "launches with that query length spin forever"),
    Drill(
        "crash", "crash_sq", "RA_INJECT_CRASH_SQ", "SQ", "launches with that query length abort the worker"
    ),
    Drill(
        "swap_rounding",
        "round_swap",
        "RA_INJECT_ROUND_SWAP",
        "A:B",
        "modes A and B round with each other's rule",
    ),
)
INJECT_MACROS: dict[str, str] = {d.key: d.macro for d in DRILLS}


def drill_usage() -> str:
    """'slowdown=PCT, ulp=N, ..., or swap_rounding=A:B': the drills as `--inject` takes them."""
    forms = [f"{d.name}={d.value}" if d.value else d.name for d in DRILLS]
    return ", ".join(forms[:-1]) + " or " + forms[-1]


# round_swap names the two modes that trade places, one bit each (kernel/common/inject.h).
ROUND_SWAP_BITS: dict[str, int] = {"rtne": 1, "rtna": 2, "rtz": 4}
ROUND_SWAP_MASKS = frozenset({3, 5, 6})


class BuildError(RuntimeError):
    """A kernel could not be built: missing source or compiler, or the compiler failed."""


@dataclass(frozen=True)
class BuildArtifact:
    backend: str
    path: Path  # the .so, or the code object for a compile-only HIP build
    compile_only: bool
    source_hash: str
    git_commit: str | None
    git_dirty: bool | None
    compiler: str
    compiler_version: str
    flags: list[str]  # the full argv, output path shown as "<out>"
    artifact_hash: str
    stats: dict[str, Any] = field(default_factory=dict)
    inject: dict[str, int] = field(default_factory=dict)
    cached: bool = False
    build_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["path"] = str(self.path)
        return d


def _recipe(backend: str, compile_only: bool) -> Recipe:
    if backend not in BACKENDS:
        raise BuildError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    return COMMANDS[BACKENDS[backend].recipe_for(compile_only)]


def source_files(backend: str, compile_only: bool = False) -> list[Path]:
    """Every file under kernel/ the backend uses, sorted by repository-relative path."""
    return _recipe_files(_recipe(backend, compile_only))


def _recipe_files(recipe: Recipe) -> list[Path]:
    files: list[Path] = []
    for d in recipe.dirs:
        root = REPO_ROOT / d
        if root.is_dir():
            files.extend(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return sorted(files, key=lambda p: p.relative_to(REPO_ROOT).as_posix())


def source_hash(backend: str, compile_only: bool = False) -> str:
    return _files_hash(source_files(backend, compile_only))


def _files_hash(files: list[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        rel = p.relative_to(REPO_ROOT).as_posix().encode()
        data = p.read_bytes()
        # Length-prefixed so that moving bytes between path and content changes the hash.
        h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_state(root: Path = REPO_ROOT) -> tuple[str | None, bool | None]:
    """(HEAD commit, whether kernel/ differs from it); (None, None) outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", "kernel"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return head.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


_VERSION_NOISE = re.compile(r"copyright|free software|warranty", re.IGNORECASE)


def compiler_version(compiler: str) -> str:
    """The identifying lines of `<compiler> --version` (copyright boilerplate dropped)."""
    try:
        res = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise BuildError(f"compiler {compiler!r} could not be run: {e}") from e
    lines = [ln.strip() for ln in (res.stdout or res.stderr).splitlines()]
    return "\n".join([ln for ln in lines if ln and not _VERSION_NOISE.search(ln)][:5])


def inject_flags(inject: dict[str, int] | None) -> list[str]:
    flags: list[str] = []
    for key, value in sorted((inject or {}).items()):
        if key not in INJECT_MACROS:
            raise BuildError(f"unknown inject key {key!r}; expected one of {', '.join(INJECT_MACROS)}")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BuildError(f"inject {key} must be a non-negative integer, got {value!r}")
        if key == "round_swap" and value and value not in ROUND_SWAP_MASKS:
            raise BuildError(f"inject round_swap must name two modes (mask 3, 5 or 6), got {value!r}")
        if value:
            flags.append(f"-D{INJECT_MACROS[key]}={value}")
    return flags


def build_argv(recipe: Recipe, compiler: str | None, extra: Sequence[str]) -> list[str]:
    argv = list(recipe.argv)
    if compiler:
        argv[0] = compiler
    i = argv.index(recipe.source)
    return [*argv[:i], *extra, *argv[i:]]


# --- compiler resource reports -------------------------------------------------------------------

_PTXAS_ENTRY = re.compile(
    r"ptxas info\s*: (?:Compiling entry function|Function properties for) '?([\w$.]+)'?"
)
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_ptxas(text: str) -> dict[str, Any]:
    """Per-kernel registers, smem, stack and spills from `nvcc -Xptxas -v` output."""
    kernels: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            current = m.group(1)
            kernels.setdefault(current, {})
            continue
        if current is None:
            continue
        if m := _PTXAS_FRAME.search(line):
            kernels[current].update(
                stack_bytes=int(m.group(1)),
                spill_store_bytes=int(m.group(2)),
                spill_load_bytes=int(m.group(3)),
            )
        elif m := _PTXAS_USED.search(line):
            k = kernels[current]
            k["registers"] = int(m.group(1))
            if s := _PTXAS_SMEM.search(m.group(2)):
                k["smem_bytes"] = int(s.group(1))
            if b := _PTXAS_BARRIERS.search(m.group(2)):
                k["barriers"] = int(b.group(1))
    return _summarise(
        kernels,
        regs="registers",
        spills=("spill_store_bytes", "spill_load_bytes"),
        scratch="stack_bytes",
        shared="smem_bytes",
    )


_AMD_REMARK = re.compile(r"remark:\s+(.*?)\s*\[-Rpass-analysis=kernel-resource-usage\]")
_AMD_KEYS: dict[str, str] = {
    "SGPRs": "sgprs",
    "VGPRs": "vgprs",
    "AGPRs": "agprs",
    "ScratchSize [bytes/lane]": "scratch_bytes",
    "Dynamic Stack": "dynamic_stack",
    "Occupancy [waves/SIMD]": "occupancy",
    "SGPRs Spill": "sgpr_spill",
    "VGPRs Spill": "vgpr_spill",
    "LDS Size [bytes/block]": "lds_bytes",
}


def parse_amdgpu_remarks(text: str) -> dict[str, Any]:
    """Per-kernel VGPR/AGPR/SGPR, scratch, occupancy, spills and LDS from clang's
    `-Rpass-analysis=kernel-resource-usage` remarks."""
    kernels: dict[str, dict[str, Any]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _AMD_REMARK.search(line)
        if not m:
            continue
        key, _, value = m.group(1).partition(":")
        key, value = key.strip(), value.strip()
        if key == "Function Name":
            current = value
            kernels.setdefault(current, {})
        elif current is not None and key in _AMD_KEYS:
            name = _AMD_KEYS[key]
            kernels[current][name] = (value == "True") if name == "dynamic_stack" else int(value)
    return _summarise(
        kernels,
        regs="vgprs",
        spills=("sgpr_spill", "vgpr_spill"),
        scratch="scratch_bytes",
        shared="lds_bytes",
    )


def _summarise(
    kernels: dict[str, dict[str, Any]], *, regs: str, spills: tuple[str, ...], scratch: str, shared: str
) -> dict[str, Any]:
    """Per-kernel facts plus the maxima a gate looks at first."""
    if not kernels:
        return {}

    def biggest(key: str) -> int:
        return max((int(k.get(key, 0)) for k in kernels.values()), default=0)

    return {
        "kernels": kernels,
        "max_registers": biggest(regs),
        "max_spill": max(sum(int(k.get(s, 0)) for s in spills) for k in kernels.values()),
        "max_scratch_bytes": biggest(scratch),
        "max_shared_bytes": biggest(shared),
    }


def parse_report(kind: str, text: str) -> dict[str, Any]:
    if kind == "ptxas":
        return parse_ptxas(text)
    if kind == "amdgpu":
        return parse_amdgpu_remarks(text)
    return {}


# --- the build -------------------------------------------------------------------------------------


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _load_cached(out_dir: Path, output: str) -> dict[str, Any] | None:
    meta_path = out_dir / BUILD_JSON
    artifact = out_dir / output
    if not (meta_path.is_file() and artifact.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(meta, dict):  # valid JSON, but not the object build_meta writes
        return None
    # A damaged or replaced artifact is rebuilt rather than trusted.
    if meta.get("schema") != SCHEMA or meta.get("artifact_hash") != _sha256_file(artifact):
        return None
    return meta


def build_kernel(
    backend: str,
    *,
    extra_flags: Sequence[str] = (),
    inject: dict[str, int] | None = None,
    compiler: str | None = None,
    compile_only: bool = False,
    cache_dir: Path | None = None,
) -> BuildArtifact:
    """Build (or fetch from the cache) the kernel library of `backend`.

    Raises BuildError when the source or compiler is missing or the compiler fails (with the tail of
    its output).
    """
    recipe = _recipe(backend, compile_only)  # checks the name
    compile_only = BACKENDS[backend].compiles_only(compile_only)
    inject_clean = {k: int(v) for k, v in sorted((inject or {}).items()) if v}
    return _build(
        backend,
        recipe,
        BACKENDS[backend].kernel,
        compile_only=compile_only,
        extra=[*inject_flags(inject), *extra_flags],
        inject_clean=inject_clean,
        compiler=compiler,
        cache_dir=cache_dir,
    )


def build_planner(backend: str, *, cache_dir: Path | None = None) -> BuildArtifact:
    """Build (or fetch from the cache) the host-only launch planner library of a GPU backend
    (`PLANNERS`). Raises BuildError for a backend without one, a missing source or a failed build."""
    if backend not in PLANNERS:
        raise BuildError(f"no launch planner for backend {backend!r}; planners: {', '.join(PLANNERS)}")
    recipe = PLANNERS[backend]
    if not (REPO_ROOT / recipe.source).is_file():
        raise BuildError(f"{backend}: the launch planner source {recipe.source} is missing from this tree")
    return _build(
        backend,
        recipe,
        f"plan-{backend}",
        compile_only=False,
        extra=[],
        inject_clean={},
        compiler=None,
        cache_dir=cache_dir,
    )


def build_op(*, compiler: str | None = None, cache_dir: Path | None = None) -> BuildArtifact:
    """Build (or fetch from the cache) the torch operator library (`op_recipe`). Raises BuildError
    when the source, the compiler or torch's headers are missing or the compiler fails."""
    recipe = op_recipe()
    if not (Path(recipe.argv[recipe.argv.index("-isystem") + 1]) / "torch" / "library.h").is_file():
        raise BuildError("torch-op: this torch install has no C++ headers (torch/include/torch/library.h)")
    return _build(
        "torch-op",
        recipe,
        "torch-op",
        compile_only=False,
        extra=[],
        inject_clean={},
        compiler=compiler,
        cache_dir=cache_dir,
    )


def _build(
    backend: str,
    recipe: Recipe,
    prefix: str,
    *,
    compile_only: bool,
    extra: list[str],
    inject_clean: dict[str, int],
    compiler: str | None,
    cache_dir: Path | None,
) -> BuildArtifact:
    """Run `recipe` (cached by source hash, argv and compiler version) and describe what it made."""
    src = REPO_ROOT / recipe.source
    if not src.is_file():
        raise BuildError(f"{backend}: source missing: {recipe.source}")
    argv = build_argv(recipe, compiler, extra)
    exe = shutil.which(argv[0])
    if exe is None:
        raise BuildError(f"{backend}: compiler {argv[0]!r} not found on PATH")
    version = compiler_version(exe)
    shash = _files_hash(_recipe_files(recipe))
    key = hashlib.sha256(json.dumps([shash, argv, version], separators=(",", ":")).encode()).hexdigest()[:16]

    cache_root = Path(cache_dir) if cache_dir is not None else resources.cache_dir()
    out_dir = cache_root / f"{prefix}-{key}"
    commit, dirty = git_state()

    def artifact(meta: dict[str, Any], path: Path, cached: bool, seconds: float) -> BuildArtifact:
        return BuildArtifact(
            backend=backend,
            path=path,
            compile_only=compile_only,
            source_hash=shash,
            git_commit=commit,
            git_dirty=dirty,
            compiler=argv[0],
            compiler_version=version,
            flags=list(argv),
            artifact_hash=meta["artifact_hash"],
            stats=meta.get("stats", {}),
            inject=inject_clean,
            cached=cached,
            build_seconds=seconds,
        )

    if (meta := _load_cached(out_dir, recipe.output)) is not None:
        return artifact(meta, out_dir / recipe.output, True, float(meta.get("build_seconds", 0.0)))

    # Build in a private folder and rename into place, so concurrent builds never see half a library.
    tmp_dir = cache_root / f".{prefix}-{key}.tmp-{os.getpid()}"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir(parents=True)
    run_argv = [str(tmp_dir / recipe.output) if a == OUT else a for a in argv]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(run_argv, cwd=REPO_ROOT, capture_output=True, text=True)
    except OSError as e:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise BuildError(f"{backend}: could not run {argv[0]!r}: {e}") from e
    seconds = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 or not (tmp_dir / recipe.output).is_file():
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise BuildError(
            f"{backend}: {argv[0]} failed (exit {proc.returncode}) on {recipe.source}:\n{_tail(log)}"
        )
    meta = {
        "schema": SCHEMA,
        "backend": backend,
        "compile_only": compile_only,
        "source_hash": shash,
        "git_commit": commit,
        "git_dirty": dirty,
        "compiler": argv[0],
        "compiler_version": version,
        "flags": argv,
        "artifact_hash": _sha256_file(tmp_dir / recipe.output),
        "stats": parse_report(recipe.report, log),
        "inject": inject_clean,
        "build_seconds": seconds,
    }
    (tmp_dir / "build.log").write_text(log)
    (tmp_dir / BUILD_JSON).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    if out_dir.exists() and _load_cached(out_dir, recipe.output) is None:
        # A damaged entry: move it aside first (rename is atomic, so a concurrent reader never sees
        # a mix of old and new files).
        stale = cache_root / f".{prefix}-{key}.stale-{os.getpid()}"
        with contextlib.suppress(OSError):
            out_dir.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp_dir.rename(out_dir)
    except OSError:
        # Another process finished the same build first; its result is identical by key.
        shutil.rmtree(tmp_dir, ignore_errors=True)
        if (theirs := _load_cached(out_dir, recipe.output)) is not None:
            return artifact(theirs, out_dir / recipe.output, True, seconds)
        raise BuildError(f"{backend}: could not place build output in {out_dir}") from None
    return artifact(meta, out_dir / recipe.output, False, seconds)
