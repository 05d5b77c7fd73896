"""The sm_90a launch planner (kernel/cuda/plan.h) from Python with no GPU: kernel/cuda/plan_host.cpp
built by g++ for a build's -D flags and called through ra_plan_launch (ctypes), so the benchmarks and
tests ask the C++ rule the kernel runs instead of restating it.

  python benchmarks/h200/cuda_plan.py B H SQ SK [-DRA_CUDA_<NAME>=N ...]    the plan as JSON
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from regress.facts.abi import RA_HEAD_DIM, DeviceFacts, LaunchPlan, Params  # noqa: E402
from regress.native.plan import shape_params  # noqa: E402

SOURCE = ROOT / "kernel" / "cuda" / "plan_host.cpp"
COMPILE = ("g++", "-std=c++17", "-O2", "-shared", "-fPIC", "-Ikernel/include")  # + flags, source, -o out
H200_SMS = 132
HEAD_DIM = RA_HEAD_DIM


# The ABI's own ctypes mirrors (regress.facts.abi), so this script and the package read one layout.
LaunchPlanC = LaunchPlan
DeviceFactsC = DeviceFacts


class PlanError(RuntimeError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _sources_hash() -> str:
    h = hashlib.sha256()
    for d in ("kernel/cuda", "kernel/common", "kernel/include"):
        for f in sorted((ROOT / d).glob("*")):
            if f.suffix in {".h", ".def", ".cpp"}:
                h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def host_library(flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """plan_host.cpp built with `flags` (cached by flags and sources under the temp directory)."""
    key = hashlib.sha256(("\0".join(flags) + _sources_hash()).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("REGRESS_PLAN_CACHE", Path(tempfile.gettempdir()) / "regress-cuda-plan"))
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"libregress_plan_cuda-{key}.so"
    if not out.exists():
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        cmd = [*COMPILE, *flags, str(SOURCE), "-o", str(tmp)]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            what = " ".join(flags) or "default flags"
            raise RuntimeError(f"g++ failed on the host planner ({what}): {r.stderr}")
        tmp.replace(out)
    lib = ctypes.CDLL(str(out))
    lib.ra_build_info.restype = ctypes.c_char_p
    lib.ra_plan_launch.restype = ctypes.c_int
    lib.ra_plan_launch.argtypes = [
        ctypes.POINTER(Params),
        ctypes.POINTER(DeviceFactsC),
        ctypes.POINTER(LaunchPlanC),
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    return lib


def build_info(flags: Iterable[str] = ()) -> dict[str, Any]:
    """The host planner's ra_build_info for `flags`: every flag's compiled value, by its key."""
    info: dict[str, Any] = json.loads(host_library(tuple(flags)).ra_build_info().decode())
    return info


def params(
    b: int, h: int, sq: int, sk: int, strides: dict[str, tuple[int, int, int, int]] | None = None
) -> Params:
    """BHSD params (or `strides` per tensor name) whose pointers are never read: regress.native.plan's own
    shape_params, so this script and the package ask the planner with the same call."""
    p = shape_params(b, h, sq, sk, layout="bhsd")
    for name, st in (strides or {}).items():
        getattr(p, f"{name}_stride")[:] = st
    return p


def plan_of(
    p: Params, flags: Iterable[str] = (), sms: int = H200_SMS, max_workspace: int = 0
) -> dict[str, Any]:
    """ra_plan_launch's plan as a dict of ra_launch_plan's fields; PlanError on a refusal."""
    lib = host_library(tuple(flags))
    out = LaunchPlanC()
    err = ctypes.create_string_buffer(512)
    st = lib.ra_plan_launch(
        ctypes.byref(p), ctypes.byref(DeviceFactsC(sms, max_workspace)), ctypes.byref(out), err, len(err)
    )
    if st != 0:
        raise PlanError(err.value.decode(), st)
    d: dict[str, Any] = {name: getattr(out, name) for name, _ in LaunchPlanC._fields_}
    d["kind"] = out.kind.decode()
    d["grid"] = list(out.grid)
    return d


def plan(b: int, h: int, sq: int, sk: int, flags: Iterable[str] = (), sms: int = H200_SMS) -> dict[str, Any]:
    return plan_of(params(b, h, sq, sk), flags, sms)


class TailPlan(NamedTuple):
    tail: int  # the last tiles, split; 0: no tail split
    splits: int  # parts per tail tile
    blocks: int  # key blocks per part


NONE = TailPlan(0, 0, 0)


class LaunchPath(NamedTuple):
    """What h200_split.py needs of a plan: which code computes a shape, which tiles in parts."""

    splits: int  # parts of the uniform split over keys; 1: unsplit
    long_n: int  # keys per block of the long-key kernel where it runs; 0: it does not
    tail: TailPlan  # the tail split's plan where the tail kernel runs; NONE: it does not
    short_n: int = 0  # keys of the short-key kernel's block where it runs
    mma_sync: bool = False  # the mma.sync fallback


def launch_path(flags: Iterable[str], b: int, h: int, sq: int, sk: int, sms: int = H200_SMS) -> LaunchPath:
    d = plan(b, h, sq, sk, flags, sms)
    kind = d["kind"]
    tail = NONE
    if kind == "sm90_tail_split":
        tail = TailPlan(d["split_tiles"], d["tail_splits"], d["blocks_per_split"])
    return LaunchPath(
        d["splits"],
        d["block_k"] if kind == "sm90_long" else 0,
        tail,
        d["block_k"] if kind == "sm90_short" else 0,
        kind == "sm80_mma_sync",
    )


def main(argv: list[str]) -> None:
    dims = [int(a) for a in argv if not a.startswith("-D")]
    flags = [a for a in argv if a.startswith("-D")]
    if len(dims) != 4:
        raise SystemExit("usage: cuda_plan.py B H SQ SK [-DRA_CUDA_<NAME>=N ...]")
    print(json.dumps(plan(*dims, flags=flags), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
