"""Hand-written gfx942 kernels for the emulator tests: assembled with llvm-mc-19, linked with
ld.lld-19 into a code object exactly like the compiler's, loaded and run by regress.emu.

`asm_kernel(body, lds=...)` returns a `Runner`; `runner(*buffers, grid=..., block=...)` runs the kernel
with s[0:1] = kernarg pointer, s2 = workgroup id x, and the kernarg holding 4 buffer pointers (unused
ones point at a small dummy). PROLOGUE loads them into s[4:11] and points v[2:3] at buffer 0's
dword for this lane.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from regress.emu.codeobject import CodeObject
from regress.emu.machine import Hazard, Launch, Memory, Trace

MC = "llvm-mc-19"
LLD = "ld.lld-19"

TEMPLATE = """\
.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
.text
.globl k
.p2align 8
.type k,@function
k:
{body}
  s_endpgm
.Lend:
{size}
.rodata
.p2align 6
.amdhsa_kernel k
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_next_free_vgpr 128
  .amdhsa_next_free_sgpr 96
  .amdhsa_accum_offset 128
  .amdhsa_kernarg_size {kd_kernarg}
  .amdhsa_float_denorm_mode_32 {denorm}
  .amdhsa_group_segment_fixed_size {lds}
  .amdhsa_private_segment_fixed_size {scratch}
  .amdhsa_enable_private_segment {scratch_on}
{directives}
.end_amdhsa_kernel
.amdgpu_metadata
---
{target}
amdhsa.version: [1, 2]
amdhsa.kernels:
  - .name: k
    .symbol: k.kd
    .kernarg_segment_size: {kernarg}
    .kernarg_segment_align: 8
    .group_segment_fixed_size: {lds}
    .private_segment_fixed_size: {scratch}
    .wavefront_size: 64
    .sgpr_count: 96
    .vgpr_count: 128
    .max_flat_workgroup_size: 512
    .args:
{args}
...
.end_amdgpu_metadata
"""


NBUFS = 4


@dataclass
class Runner:
    code: CodeObject
    records: list | None = None  # per workgroup, each wave's issued pcs (record=True; timing tests)

    def __call__(
        self,
        *buffers: np.ndarray,
        grid: int | tuple[int, ...] = 1,
        block: int = 64,
        strict: bool = True,
        record: bool = False,
    ) -> tuple[list[Hazard], Trace]:
        assert len(buffers) <= NBUFS
        buffers = (*buffers, *(np.zeros(4, np.uint32) for _ in range(NBUFS - len(buffers))))
        mem = Memory()
        for b in buffers:
            mem.map(b.ctypes.data, b.view(np.uint8).reshape(-1))
        kernel = self.code.kernels["k"]
        # The kernarg from the metadata: buffers in order; hidden arguments the launch knows.
        grid3 = (grid, 1, 1) if isinstance(grid, int) else (*grid, 1, 1)[:3]
        kernarg = bytearray(kernel.kernarg_size)
        known = {
            "hidden_block_count_x": grid3[0],
            "hidden_group_size_x": block,
            "hidden_group_size_y": 1,
            "hidden_group_size_z": 1,
            "hidden_block_count_y": 1,
            "hidden_block_count_z": 1,
        }
        pointers = iter(buffers)
        for arg in kernel.args:
            kind, off, size = arg[".value_kind"], arg[".offset"], arg[".size"]
            value = next(pointers).ctypes.data if kind == "global_buffer" else known.get(kind, 0)
            kernarg[off : off + size] = value.to_bytes(size, "little")
        launch = Launch(kernel, mem, bytes(kernarg), strict=strict, record=record)
        trace = launch.run(grid3, block)
        self.records = launch.records
        return launch.hazards, trace


def _tools() -> tuple[str, str]:
    mc, lld = shutil.which(MC), shutil.which(LLD)
    if not (mc and lld):
        pytest.fail(f"{MC} and {LLD} are needed (scripts/test.sh installs llvm-19 and lld-19)")
    return mc, lld


@pytest.fixture(scope="session")
def asm_kernel(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Runner]:
    root = tmp_path_factory.mktemp("asm")

    def build(
        body: str,
        *,
        lds: int = 0,
        scratch: int = 0,
        denorm: int = 3,
        directives: str = "",
        hand_written: bool = False,
    ) -> Runner:
        """`denorm`: FLOAT_DENORM_MODE_32; `directives`: more .amdhsa_* lines; `hand_written`: the
        object as AITER's assembler leaves it (function symbol size 0, no amdhsa.target, descriptor
        kernarg size 0: the loader falls back to .text's end, e_flags and the metadata)."""
        mc, lld = _tools()
        args = "\n".join(
            f"      - {{.offset: {8 * i}, .size: 8, .value_kind: global_buffer, .address_space: global}}"
            for i in range(NBUFS)
        )
        src = TEMPLATE.format(
            body=body,
            lds=lds,
            kernarg=8 * NBUFS,
            args=args,
            scratch=scratch,
            scratch_on=int(scratch > 0),
            denorm=denorm,
            directives=directives,
            size="" if hand_written else ".size k, .Lend-k",
            kd_kernarg=0 if hand_written else 8 * NBUFS,
            target="" if hand_written else "amdhsa.target: amdgcn-amd-amdhsa--gfx942",
        )
        tag = hashlib.sha256(src.encode()).hexdigest()[:16]
        s, o, co = root / f"{tag}.s", root / f"{tag}.o", root / f"{tag}.co"
        if not co.exists():
            s.write_text(src)
            p = subprocess.run(
                [mc, "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-filetype=obj", str(s), "-o", str(o)],
                capture_output=True,
                text=True,
            )
            assert p.returncode == 0, p.stderr
            p = subprocess.run([lld, "-shared", str(o), "-o", str(co)], capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
        return Runner(CodeObject.load(co))

    return build


@pytest.fixture(scope="session")
def hip_kernel(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Runner]:
    """Compiles HIP device code (a kernel named k) with the project's clang-19 device-only flags."""
    from regress.native.build import COMMANDS, REPO_ROOT

    root = tmp_path_factory.mktemp("hip")
    recipe = COMMANDS["hip-compile-only"]

    def build(source: str) -> Runner:
        tag = hashlib.sha256(source.encode()).hexdigest()[:16]
        src, co = root / f"{tag}.hip", root / f"{tag}.co"
        if not co.exists():
            src.write_text(source)
            argv = [str(src) if a == recipe.source else str(co) if a == "<out>" else a for a in recipe.argv]
            p = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True)
            assert p.returncode == 0, p.stderr[-3000:]
        return Runner(CodeObject.load(co))

    return build
