"""Execution of a gfx942 kernel launch on the CPU: wave64 register files, workgroups with LDS and
s_barrier, global memory over host buffers, and the hazard checks that make bugs visible.

Scheduling: the waves of a workgroup run one at a time, each until it reaches s_barrier or
s_endpgm; the barrier releases when every wave that has not ended has arrived. Workgroups run one
after another. Memory is read and written at issue, but a load's destination registers hold a NaN
poison pattern until an s_waitcnt covers the load, when the data lands: a read of such a pending
register is reported, and in non-strict mode it sees the poison, never the data early.

Hazards reported (EmuHazard in strict mode, else collected in `Launch.hazards`):
  waitcnt   a register written by a load (global, LDS, scalar) is read or overwritten before an
            s_waitcnt whose counter covers that load (vmcnt in order; lgkmcnt in order for LDS,
            only lgkmcnt(0) for scalar loads, which may return out of order);
  lds-race  an LDS dword written by one wave and read or written by another (or read by one and
            written by another) with no s_barrier between them; a read of LDS nobody wrote;
  lds-barrier  an s_barrier reached while the wave's own LDS writes are not yet covered by
            s_waitcnt (the barrier orders issue, not completion; LLVM always waits first);
  mfma      the gfx940/gfx942 matrix-core wait states of regress.emu.hazards.RULES, the one table
            the static scan of a code object reads too (each report starts with its rule's name):
            an XDL result read or overwritten by a non-MFMA instruction, or read as SrcA/B by
            another MFMA, fewer than passes + 3 wait states after issue (7 for the 4-pass
            16x16x16, 11 for the 8-pass 32x32x8), or read as a partly overlapping SrcC fewer than
            passes + 1; a VALU-written VGPR read by an MFMA fewer than 2 wait states later; EXEC
            written by a VALU fewer than 4 before an MFMA; a VGPR an MFMA reads as SrcC
            overwritten by a VALU fewer than 3 (4 passes) or 7 (8) later.
            Every issued instruction is one wait state, s_nop N is N + 1.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from regress.emu import fp
from regress.emu.codeobject import Kernel
from regress.emu.hazards import wait
from regress.emu.isa import (
    CLASSES,
    EXEC,
    M0,
    M32,
    M64,
    VCC,
    Exec,
    Meta,
    UnsupportedInstruction,
    compile_instruction,
)

LANE_SHIFTS = np.arange(64, dtype=np.uint64)
VALU_TO_MFMA_WS = wait("valu-write-mfma-read")
EXEC_TO_MFMA_WS = wait("exec-write-mfma")


def mfma_result_ws(passes: int) -> int:
    """Wait states before a non-MFMA may read or overwrite an XDL MFMA's result (regress.emu.hazards)."""
    return wait("mfma-result-read", passes)


def mfma_srcc_war_ws(passes: int) -> int:
    """Wait states before a VALU may overwrite a VGPR an XDL MFMA reads as SrcC (regress.emu.hazards)."""
    return wait("mfma-srcc-war", passes)


LDS_BYTES = 65536
VGPR_POISON = 0x7FBADBAD  # a NaN: reads of registers nobody wrote stand out
LDS_BANKS = 32


class EmuFault(RuntimeError):
    """The kernel did something the hardware would fault on (out-of-bounds address, bad launch)."""


class EmuHazard(RuntimeError):
    """A hazard the hardware would turn into wrong results (see the module docstring)."""


@dataclass(frozen=True)
class Hazard:
    kind: str  # "waitcnt", "lds-race", "mfma"
    kernel: str
    workgroup: tuple[int, int, int]
    wave: int
    addr: int
    text: str
    detail: str

    def __str__(self) -> str:
        return (
            f"{self.kind} hazard in {self.kernel} wg{self.workgroup} wave {self.wave} at +0x{self.addr:x} "
            f"`{self.text}`: {self.detail}"
        )


# --- LDS bank model ---------------------------------------------------------------------------------

_BANK_CACHE: dict[tuple[int, int, bytes], tuple[int, int]] = {}


def _bank_cycles(idx: np.ndarray, ndw: int) -> tuple[int, int]:
    """(cycles, conflict-free cycles) of one LDS access, [lanes, ndw] dword indices. The count
    depends only on the pattern relative to its lowest dword and that dword's bank, so loops that
    repeat an access pattern at other addresses hit the cache."""
    lo = int(idx.min())
    key = (ndw, lo % LDS_BANKS, (idx - lo).astype(np.int32).tobytes())
    hit = _BANK_CACHE.get(key)
    if hit is not None:
        return hit
    per = {4: 8, 2: 16, 1: 32}[ndw]
    n = idx.shape[0]
    groups = -(-n // per)
    pad = np.full((groups * per - n, ndw), -1, dtype=np.int64)
    g = np.sort(np.concatenate([idx, pad]).reshape(groups, per * ndw), axis=1)
    first = np.ones(g.shape, dtype=bool)
    first[:, 1:] = g[:, 1:] != g[:, :-1]
    first &= g >= 0  # distinct dwords only, padding left out
    rows = np.broadcast_to(np.arange(groups)[:, None], g.shape)
    load = np.zeros((groups, LDS_BANKS), dtype=np.int64)
    np.add.at(load, (rows[first], g[first] % LDS_BANKS), 1)
    out = (int(load.max(axis=1).sum()), int((-(-first.sum(axis=1) // LDS_BANKS)).sum()))
    if len(_BANK_CACHE) < 65536:
        _BANK_CACHE[key] = out
    return out


# --- memory -----------------------------------------------------------------------------------------


class Memory:
    """Flat global address space made of host buffers (numpy views of torch storages)."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._bufs: list[np.ndarray] = []

    def map(self, base: int, buf: np.ndarray) -> None:
        """`buf` is a writable uint8 view of the host bytes at address `base`."""
        for b, m in zip(self._bases, self._bufs, strict=True):
            if base < b + m.size and b < base + buf.size:
                if b == base and m.size == buf.size:
                    return
                raise EmuFault(f"overlapping buffers at 0x{base:x}")
        self._bases.append(base)
        self._bufs.append(buf)
        order = np.argsort(self._bases)
        self._bases = [self._bases[i] for i in order]
        self._bufs = [self._bufs[i] for i in order]

    def _words(self, b: int) -> np.ndarray:
        """Buffer b as uint32 words (its whole dwords from its first byte)."""
        buf = self._bufs[b]
        return buf[: buf.size // 4 * 4].view(np.uint32)

    def map_host(self, ptr: int, nbytes: int) -> None:
        self.map(ptr, np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr)))

    def _locate(self, addrs: np.ndarray, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
        """(buffer index per address, offset within it); faults if any access leaves its buffer."""
        bases = np.asarray(self._bases, dtype=np.uint64)
        idx = np.searchsorted(bases, addrs, side="right") - 1
        if (idx < 0).any():
            raise EmuFault(f"access below every buffer at 0x{int(addrs[idx < 0][0]):x}")
        off = (addrs - bases[idx]).astype(np.int64)
        sizes = np.asarray([b.size for b in self._bufs], dtype=np.int64)[idx]
        bad = off + nbytes > sizes
        if bad.any():
            raise EmuFault(f"out-of-bounds access of {nbytes} B at 0x{int(addrs[bad][0]):x}")
        return idx, off

    def load(self, addrs: np.ndarray, nbytes: int) -> np.ndarray:
        """[n] uint64 addresses -> [n, nbytes // 4] uint32."""
        idx, off = self._locate(addrs, nbytes)
        if addrs.size and nbytes % 4 == 0 and (idx == idx[0]).all() and not (off % 4).any():
            # One buffer, dword-aligned (nearly every access): a single gather of dwords.
            words = self._words(int(idx[0]))
            return words[(off // 4)[:, None] + np.arange(nbytes // 4)]
        out = np.empty((addrs.size, nbytes), dtype=np.uint8)
        span = np.arange(nbytes)
        for b in np.unique(idx):
            sel = idx == b
            out[sel] = self._bufs[b][off[sel, None] + span]
        return out.view(np.uint32).reshape(addrs.size, nbytes // 4)

    def store(self, addrs: np.ndarray, data: np.ndarray) -> None:
        """data: [n, dwords] uint32, or [n, bytes] uint8 for sub-dword stores."""
        raw = np.ascontiguousarray(data)
        raw = raw.view(np.uint8).reshape(addrs.size, -1)
        nbytes = raw.shape[1]
        idx, off = self._locate(addrs, nbytes)
        span = np.arange(nbytes)
        for b in np.unique(idx):
            sel = idx == b
            self._bufs[b][off[sel, None] + span] = raw[sel]


# --- trace ------------------------------------------------------------------------------------------


@dataclass
class Trace:
    """What a launch issued, summed over all waves (the cost report reads this)."""

    issued: Counter[str] = field(default_factory=Counter)  # by class, s_nop counted once per instr
    nop_wait_states: int = 0
    lds_bytes: int = 0
    lds_cycles: int = 0  # bank-conflict model: see Wave._lds_cycles
    lds_ideal_cycles: int = 0
    global_bytes_read: int = 0
    global_bytes_written: int = 0
    smem_bytes: int = 0
    waves: int = 0
    active_waves: int = 0  # waves that issued at least one MFMA
    instructions: int = 0


# --- a wave ------------------------------------------------------------------------------------------


@dataclass
class Pending:
    """An issued memory operation no s_waitcnt has covered yet."""

    pc: int
    kind: str  # "vm", "lds" (a read), "lds-write", "smem"
    regs: tuple[int, ...]  # destination registers (VGPRs, or SGPRs for "smem")
    land: Callable[[], None] | None  # writes the loaded data into them
    lds_dwords: np.ndarray | None = None  # LDS dwords a direct-to-LDS buffer load writes


class Wave:
    def __init__(self, wg: Workgroup, wave_id: int) -> None:
        self.wg = wg
        self.id = wave_id
        self.v = np.full((256, 64), VGPR_POISON, dtype=np.uint32)
        self.vf = self.v.view(np.float32)
        self.s = [0] * 128
        self.scc = 0
        self.exec = M64
        self.mask = np.ones(64, dtype=bool)
        self.full = True
        self.pc = 0
        self.done = False
        self.epoch = 0  # barriers passed
        self.ws = 0  # wait states issued so far
        # Outstanding memory operations in issue order (see Pending).
        self.vm_queue: list[Pending] = []
        self.lgkm_queue: list[Pending] = []
        self.pending_v: Counter[int] = Counter()
        self.pending_s: Counter[int] = Counter()
        # register -> (wait state of the MFMA's issue, wait states it needs)
        self.mfma_dst: dict[int, tuple[int, int]] = {}
        self.mfma_srcc: dict[int, tuple[int, int]] = {}
        # register -> (the whole destination it belongs to, the writer's SrcC-overlap wait states)
        self.mfma_tuple: dict[int, tuple[tuple[int, ...], int]] = {}
        self.valu_exec_ws = -(10**9)
        self.valu_write: dict[int, int] = {}
        self.last_mfma_ws = -(10**9)
        self.mfma_window = 0  # wait states after the last MFMA within which a hazard may remain
        self.issued_mfma = False
        self.prio = 0  # s_setprio
        self.dma_pending = 0  # direct-to-LDS buffer loads not yet landed
        self.dma_dwords: np.ndarray | None = None  # per LDS dword: how many of them write it
        # Timing record (Launch(record=True)): the pcs issued in order, and the LDS bank cycles of the
        # ones that accessed LDS, keyed by their position in `rec` (regress.emu.timing replays these).
        self.rec: list[int] | None = [] if wg.launch.record else None
        self.lds_log: dict[int, int] = {}
        self.private: np.ndarray | None = None  # scratch, [dwords, 64 lanes], made on first use
        self.ftz = wg.launch.ftz

    # ---- register file ----
    def _exec_changed(self) -> None:
        self.exec = self.s[EXEC] | (self.s[EXEC + 1] << 32)
        self.full = self.exec == M64
        self.mask = ((np.uint64(self.exec) >> LANE_SHIFTS) & np.uint64(1)).astype(bool)

    def sset(self, d: int, val: int) -> None:
        self.s[d] = int(val) & M32
        if d in (EXEC, EXEC + 1):
            self._exec_changed()

    def sset64(self, d: int, val: int) -> None:
        val = int(val) & M64
        self.s[d] = val & M32
        self.s[d + 1] = val >> 32
        if d in (EXEC, EXEC + 1, EXEC - 1):
            self._exec_changed()

    def lanes(self, sreg: int) -> np.ndarray:
        val = self.s[sreg] | (self.s[sreg + 1] << 32)
        return ((np.uint64(val) >> LANE_SHIFTS) & np.uint64(1)).astype(bool)

    def set_mask_reg(self, d: int, lanes: np.ndarray) -> None:
        self.sset64(d, int(np.packbits(lanes, bitorder="little").view("<u8")[0]))

    def vset(self, d: int, val: Any) -> None:
        if self.full:
            self.v[d] = val
        else:
            np.copyto(self.v[d], np.asarray(val, dtype=np.uint32), where=self.mask)

    def vsetf(self, d: int, val: Any) -> None:
        if self.ftz:
            val = fp.flush_denorm(val)
        if self.full:
            self.vf[d] = val
        else:
            np.copyto(self.vf[d], np.asarray(val, dtype=np.float32), where=self.mask)

    def vset64(self, d: int, val: np.ndarray) -> None:
        self.vset(d, (val & np.uint64(M32)).astype(np.uint32))
        self.vset(d + 1, (val >> np.uint64(32)).astype(np.uint32))

    def getpc(self, offset: int) -> int:
        """The address of the instruction at `offset` from the entry, in the loaded image."""
        base = self.wg.launch.entry_addr
        if not base:
            raise EmuFault(f"{self.wg.launch.kernel.name} reads its PC, but its code object is not mapped")
        return base + offset

    # ---- SCC helpers for scalar ALU ----
    def carry(self, x: int) -> int:
        self.scc = int(x > M32)
        return x & M32

    def borrow(self, x: int) -> int:
        self.scc = int(x < 0)
        return x & M32

    def overflow(self, x: int) -> int:
        self.scc = int(not (-(1 << 31) <= x < (1 << 31)))
        return x & M32

    def nz(self, x: int) -> int:
        self.scc = int(x != 0)
        return x

    # ---- memory ----
    def _active(self) -> np.ndarray:
        return np.flatnonzero(self.mask)

    def global_load(self, addr: Any, offset: int, d: int, ndw: int) -> None:
        lanes = self._active()
        regs = tuple(range(d, d + ndw))
        if lanes.size:
            a = np.broadcast_to(np.asarray(addr, np.uint64), (64,))[lanes] + np.uint64(offset)
            data = self.wg.launch.memory.load(a, 4 * ndw)
            self.wg.launch.trace.global_bytes_read += 4 * ndw * lanes.size
            self.vm_queue.append(Pending(self.pc, "vm", regs, self._poison_v(d, ndw, lanes, data)))
            for r in regs:
                self.pending_v[r] += 1
        else:
            self.vm_queue.append(Pending(self.pc, "vm", (), None))

    # ---- buffer (MUBUF) ----
    def _buffer_dwords(
        self, rsrc: list[int], soff: int, voff: Any, inst_off: int, ndw: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(active lanes, [n, ndw] addresses, [n, ndw] in-range mask) of a raw-buffer access."""
        if (rsrc[1] >> 16) & 0x3FFF or rsrc[1] >> 31 or (rsrc[3] >> 23) & 1:
            raise EmuFault(
                "buffer resource with a stride, swizzling or add_tid: only raw buffers are modelled "
                f"(words {', '.join(f'0x{x:08x}' for x in rsrc)})"
            )
        base = rsrc[0] | ((rsrc[1] & 0xFFFF) << 32)
        lanes = self._active()
        start = np.broadcast_to(np.asarray(voff, np.uint64), (64,))[lanes] + np.uint64(inst_off + soff)
        byte = start[:, None] + np.arange(0, 4 * ndw, 4, dtype=np.uint64)
        # CDNA3's range check counts soffset (Triton's CDNA3 buffer documentation: soffset is "counted
        # by the bounds check"; AITER v3 relies on it: it steps its K/V tiles by soffset, so the tail
        # tile's rows past seqlen_k read 0, not the memory after the tensor). Each dword is in range
        # iff it ends at or below num_records.
        inb = byte + np.uint64(4) <= np.uint64(rsrc[2])
        return lanes, np.uint64(base) + byte, inb

    def _buffer_read(self, addrs: np.ndarray, inb: np.ndarray) -> np.ndarray:
        data = np.zeros(addrs.shape, np.uint32)
        if inb.any():
            data[inb] = self.wg.launch.memory.load(addrs[inb], 4)[:, 0]
            self.wg.launch.trace.global_bytes_read += 4 * int(inb.sum())
        return data

    def buffer_load(self, rsrc: list[int], soff: int, voff: Any, inst_off: int, d: int, ndw: int) -> None:
        lanes, addrs, inb = self._buffer_dwords(rsrc, soff, voff, inst_off, ndw)
        regs = tuple(range(d, d + ndw))
        if not lanes.size:
            self.vm_queue.append(Pending(self.pc, "vm", (), None))
            return
        data = self._buffer_read(addrs, inb)
        self.vm_queue.append(Pending(self.pc, "vm", regs, self._poison_v(d, ndw, lanes, data)))
        for r in regs:
            self.pending_v[r] += 1

    def buffer_store(self, rsrc: list[int], soff: int, voff: Any, inst_off: int, src: int, ndw: int) -> None:
        lanes, addrs, inb = self._buffer_dwords(rsrc, soff, voff, inst_off, ndw)
        if lanes.size and inb.any():
            data = np.ascontiguousarray(self.v[src : src + ndw, lanes].T)
            self.wg.launch.memory.store(addrs[inb], data[inb][:, None])
            self.wg.launch.trace.global_bytes_written += 4 * int(inb.sum())
        self.vm_queue.append(Pending(self.pc, "vm", (), None))

    def buffer_load_lds(self, rsrc: list[int], soff: int, voff: Any, inst_off: int) -> None:
        """buffer_load_dword ... lds: lane l's dword lands in LDS at M0 + inst_offset + 4 l. Counted
        on vmcnt; the LDS bytes hold the poison pattern until an s_waitcnt vmcnt covers the load."""
        lanes, addrs, inb = self._buffer_dwords(rsrc, soff, voff, inst_off, 1)
        if not lanes.size:
            self.vm_queue.append(Pending(self.pc, "vm", (), None))
            return
        dst = (self.s[M0] & 0x3FFFF) + inst_off + 4 * lanes.astype(np.int64)
        if dst.max() + 4 > self.wg.lds_size:
            raise EmuFault(f"LDS-direct buffer load past {self.wg.lds_size} B at {int(dst.max())}")
        idx = dst // 4
        data = self._buffer_read(addrs, inb)[:, 0]
        wg = self.wg
        wg.check_lds(self, idx, write=True)
        wg.lds[idx] = VGPR_POISON
        wg.launch.trace.lds_bytes += 4 * lanes.size
        if self.dma_dwords is None:
            self.dma_dwords = np.zeros(LDS_BYTES // 4, np.int16)
        in_flight = self.dma_dwords

        def land() -> None:
            wg.check_lds(self, idx, write=True)
            wg.lds[idx] = data
            self.dma_pending -= 1
            np.subtract.at(in_flight, idx, 1)

        self.vm_queue.append(Pending(self.pc, "vm", (), land, idx))
        self.dma_pending += 1
        np.add.at(in_flight, idx, 1)

    def _check_dma(self, idx: np.ndarray) -> None:
        """A read of LDS that this wave's direct-to-LDS loads still have in flight."""
        if self.dma_dwords is not None and self.dma_dwords[idx].any():
            self.wg.hazard(
                self,
                self.pc,
                "waitcnt",
                "LDS read of bytes a buffer_load ... lds no s_waitcnt vmcnt has covered",
            )

    def _poison_v(self, d: int, ndw: int, lanes: np.ndarray, data: np.ndarray) -> Callable[[], None]:
        """Fill the destination lanes with the poison pattern now; the returned write lands the data."""
        self.v[d : d + ndw, lanes] = VGPR_POISON

        def land() -> None:
            for k in range(ndw):
                self.v[d + k, lanes] = data[:, k]

        return land

    def global_store(self, addr: Any, offset: int, src: int, ndw: int, nbytes: int = 0) -> None:
        """Stores ndw dwords per lane, or only the low `nbytes` bytes of one (global_store_short)."""
        lanes = self._active()
        if lanes.size:
            a = np.broadcast_to(np.asarray(addr, np.uint64), (64,))[lanes] + np.uint64(offset)
            data: np.ndarray = np.ascontiguousarray(self.v[src : src + ndw, lanes].T)
            if nbytes:
                data = data.view(np.uint8)[:, :nbytes]
            self.wg.launch.memory.store(a, data)
            self.wg.launch.trace.global_bytes_written += (nbytes or 4 * ndw) * lanes.size
        self.vm_queue.append(Pending(self.pc, "vm", (), None))

    def scratch(self, addr: Any, d: int, ndw: int, store: bool) -> None:
        """scratch_load/store_dword*: each lane's private memory (the descriptor's private segment
        size per lane), vmcnt-counted like any vector memory operation."""
        size = self.wg.launch.kernel.descriptor.private_segment_size
        if self.private is None:
            self.private = np.full((max(size, 4) // 4, 64), VGPR_POISON, dtype=np.uint32)
        lanes = self._active()
        a = np.broadcast_to(np.asarray(addr, np.int64), (64,))[lanes]
        if ((a % 4) != 0).any() or (a + 4 * ndw > size).any():
            raise EmuFault(f"scratch access at {int(a.max())} outside the {size} B private segment")
        rows = a[None, :] // 4 + np.arange(ndw)[:, None]  # [ndw, n]
        if store:
            self.private[rows, lanes[None, :]] = self.v[d : d + ndw, lanes]
            self.vm_queue.append(Pending(self.pc, "vm", (), None))
            return
        regs = tuple(range(d, d + ndw))
        data = self.private[rows, lanes[None, :]].T.copy()
        self.vm_queue.append(Pending(self.pc, "vm", regs, self._poison_v(d, ndw, lanes, data)))
        for r in regs:
            self.pending_v[r] += 1

    def smem_load(self, d: int, addr: int, ndw: int) -> None:
        data = self.wg.launch.memory.load(np.asarray([addr & ~3], dtype=np.uint64), 4 * ndw)[0]
        self.wg.launch.trace.smem_bytes += 4 * ndw
        regs = tuple(range(d, d + ndw))
        for r in regs:
            self.s[r] = VGPR_POISON

        def land() -> None:
            for k in range(ndw):
                self.sset(d + k, int(data[k]))

        self.lgkm_queue.append(Pending(self.pc, "smem", regs, land))
        for r in regs:
            self.pending_s[r] += 1

    def _lds_dwords(self, addr: Any, offset: int, ndw: int) -> tuple[np.ndarray, np.ndarray]:
        lanes = self._active()
        base = (np.broadcast_to(np.asarray(addr, np.uint64), (64,))[lanes] + np.uint64(offset)).astype(
            np.int64
        )
        if (base % 4).any():
            raise EmuFault("misaligned LDS access")
        if (base + 4 * ndw > self.wg.lds_size).any():
            raise EmuFault(f"LDS access past {self.wg.lds_size} B at {int(base.max())}")
        return lanes, base[:, None] // 4 + np.arange(ndw)

    def lds_read(self, addr: Any, offset: int, d: int, ndw: int) -> None:
        lanes, idx = self._lds_dwords(addr, offset, ndw)
        wg = self.wg
        if lanes.size:
            wg.check_lds(self, idx.ravel(), write=False)
            if self.dma_pending:
                self._check_dma(idx)
            data = wg.lds[idx]
            self._lds_cost(idx, ndw)
            regs = tuple(range(d, d + ndw))
            self.lgkm_queue.append(Pending(self.pc, "lds", regs, self._poison_v(d, ndw, lanes, data)))
            for r in regs:
                self.pending_v[r] += 1
        else:
            self.lgkm_queue.append(Pending(self.pc, "lds", (), None))

    def lds_read2(self, addr: Any, offsets: tuple[int, int], d: int, ndw: int) -> None:
        """ds_read2*: two elements of ndw dwords at addr + offsets[0] and addr + offsets[1] into
        d .. d + 2 ndw - 1, one LDS operation (one lgkmcnt)."""
        lanes, i0 = self._lds_dwords(addr, offsets[0], ndw)
        _, i1 = self._lds_dwords(addr, offsets[1], ndw)
        if not lanes.size:
            self.lgkm_queue.append(Pending(self.pc, "lds", (), None))
            return
        idx = np.concatenate([i0, i1], axis=1)
        self.wg.check_lds(self, idx.ravel(), write=False)
        if self.dma_pending:
            self._check_dma(idx)
        self._lds_cost(i0, ndw)
        self._lds_cost(i1, ndw)
        regs = tuple(range(d, d + 2 * ndw))
        land = self._poison_v(d, 2 * ndw, lanes, self.wg.lds[idx])
        self.lgkm_queue.append(Pending(self.pc, "lds", regs, land))
        for r in regs:
            self.pending_v[r] += 1

    def ds_swizzle(self, d: int, src: Any, src_lane: np.ndarray) -> None:
        """D[lane] = src[src_lane[lane]] (0 where that lane is inactive); LDS hardware, no memory."""
        data = np.where(self.mask, np.broadcast_to(np.asarray(src, np.uint32), (64,)), 0).astype(np.uint32)
        lanes = self._active()
        result = data[src_lane][lanes][:, None]
        self.lgkm_queue.append(Pending(self.pc, "lds", (d,), self._poison_v(d, 1, lanes, result)))
        self.pending_v[d] += 1

    def lds_write(self, addr: Any, offset: int, src: int, ndw: int) -> None:
        lanes, idx = self._lds_dwords(addr, offset, ndw)
        if lanes.size:
            self.wg.check_lds(self, idx.ravel(), write=True)
            self.wg.lds[idx] = self.v[src : src + ndw, lanes].T
            self._lds_cost(idx, ndw)
        self.lgkm_queue.append(Pending(self.pc, "lds-write", (), None))

    def ds_bpermute(self, d: int, addr: Any, src: Any, offset: int) -> None:
        """D[lane] = src[(addr[lane] + offset) / 4 mod 64], from active source lanes (else 0)."""
        a = np.broadcast_to(np.asarray(addr, np.uint64), (64,)) + np.uint64(offset)
        sel = ((a >> np.uint64(2)) & np.uint64(63)).astype(np.int64)
        data = np.where(self.mask, np.broadcast_to(np.asarray(src, np.uint32), (64,)), 0).astype(np.uint32)
        lanes = self._active()
        result = data[sel][lanes][:, None]
        self.lgkm_queue.append(Pending(self.pc, "lds", (d,), self._poison_v(d, 1, lanes, result)))
        self.pending_v[d] += 1

    def ds_permute(self, d: int, addr: Any, src: Any, offset: int) -> None:
        """Forward permute: each active lane l sends src[l] to lane (addr[l] + offset) / 4 mod 64 (the
        highest sending lane wins); D of active lanes = what they were sent, 0 if nothing."""
        a = np.broadcast_to(np.asarray(addr, np.uint64), (64,)) + np.uint64(offset)
        to = ((a >> np.uint64(2)) & np.uint64(63)).astype(np.int64)
        data = np.broadcast_to(np.asarray(src, np.uint32), (64,))
        lanes = self._active()
        tmp = np.zeros(64, np.uint32)
        tmp[to[lanes]] = data[lanes]  # numpy fancy assignment: the last (highest) lane wins
        result = tmp[lanes][:, None]
        self.lgkm_queue.append(Pending(self.pc, "lds", (d,), self._poison_v(d, 1, lanes, result)))
        self.pending_v[d] += 1

    def _lds_cost(self, idx: np.ndarray, ndw: int) -> None:
        """Bank-conflict model: 32 banks of 4 B; a 128-bit access is served 8 lanes per cycle, 64-bit
        16 lanes, 32-bit 32 lanes; a cycle group takes as many cycles as its most loaded bank holds
        distinct dwords."""
        t = self.wg.launch.trace
        cycles, ideal = _bank_cycles(idx, ndw)
        t.lds_cycles += cycles
        t.lds_ideal_cycles += ideal
        if self.rec is not None:
            at = len(self.rec) - 1
            self.lds_log[at] = self.lds_log.get(at, 0) + cycles
        t.lds_bytes += idx.size * 4

    def waitcnt(self, vm: int, lgkm: int) -> None:
        while len(self.vm_queue) > vm:
            self._land(self.vm_queue.pop(0))
        if len(self.lgkm_queue) > lgkm:
            keep: list[Pending] = []
            excess = len(self.lgkm_queue) - lgkm
            for item in self.lgkm_queue:
                # In-order LDS results retire oldest first; a scalar load only under lgkmcnt(0).
                if excess > 0 and (item.kind != "smem" or lgkm == 0):
                    excess -= 1
                    self._land(item)
                else:
                    keep.append(item)
            self.lgkm_queue = keep

    def _land(self, item: Pending) -> None:
        if item.land is not None:
            item.land()
        pend = self.pending_s if item.kind == "smem" else self.pending_v
        for r in item.regs:
            self._retire(pend, r)

    @staticmethod
    def _retire(pend: Counter[int], r: int) -> None:
        pend[r] -= 1
        if pend[r] <= 0:
            del pend[r]

    # ---- hazards ----
    def _vm_only_waw(self, r: int, meta: Meta) -> bool:
        """A vector-memory load overwriting a register only earlier vector-memory loads have in
        flight: loads return in order, so the later one lands last (MoonMath's discard-sink L1
        prefetch does this)."""
        return r not in meta.vreads and not any(r in p.regs for p in self.lgkm_queue)

    def check(self, ins_idx: int, meta: Meta) -> None:
        wg = self.wg
        if self.pending_v:
            for r in meta.vreads + meta.vwrites:
                if r in self.pending_v and not (meta.cls == "global" and self._vm_only_waw(r, meta)):
                    wg.hazard(
                        self,
                        ins_idx,
                        "waitcnt",
                        f"v{r} is the destination of a load no s_waitcnt has covered",
                    )
        if self.pending_s:
            for r in meta.sreads + meta.swrites:
                if r in self.pending_s:
                    wg.hazard(
                        self,
                        ins_idx,
                        "waitcnt",
                        f"s{r} is the destination of a scalar load no s_waitcnt(0) has covered",
                    )
        ws = self.ws
        if meta.cls == "mfma":
            if ws - self.valu_exec_ws - 1 < EXEC_TO_MFMA_WS:
                wg.hazard(
                    self,
                    ins_idx,
                    "mfma",
                    f"[exec-write-mfma] EXEC written by a VALU {ws - self.valu_exec_ws - 1} wait states"
                    " before the MFMA",
                )
            for r in meta.mfma_ab:
                td = self.mfma_dst.get(r)
                if td is not None and ws - td[0] - 1 < td[1]:
                    wg.hazard(
                        self,
                        ins_idx,
                        "mfma",
                        f"[mfma-result-srcab] v{r} (an MFMA result {ws - td[0] - 1} wait states old,"
                        f" needs {td[1]}) read as SrcA/B",
                    )
                t = self.valu_write.get(r)
                if t is not None and ws - t - 1 < VALU_TO_MFMA_WS:
                    wg.hazard(
                        self,
                        ins_idx,
                        "mfma",
                        f"[valu-write-mfma-read] v{r} written by a VALU {ws - t - 1} wait states before"
                        " the MFMA reads it",
                    )
            c = meta.mfma_c
            for r in c:
                t = self.valu_write.get(r)
                if t is not None and ws - t - 1 < VALU_TO_MFMA_WS:
                    wg.hazard(
                        self,
                        ins_idx,
                        "mfma",
                        f"[valu-write-mfma-read] v{r} written by a VALU {ws - t - 1} wait states before"
                        " the MFMA reads it",
                    )
                td, tt = self.mfma_dst.get(r), self.mfma_tuple.get(r)
                if td is not None and tt is not None and ws - td[0] - 1 < tt[1] and tt[0] != c:
                    wg.hazard(
                        self,
                        ins_idx,
                        "mfma",
                        f"[mfma-srcc-overlap] v{r} read as a SrcC that only partly overlaps an MFMA result"
                        f" {ws - td[0] - 1} wait states old (needs {tt[1]})",
                    )
        elif ws - self.last_mfma_ws - 1 < self.mfma_window:
            for r in meta.vreads + meta.vwrites:
                td = self.mfma_dst.get(r)
                if td is not None and ws - td[0] - 1 < td[1]:
                    wg.hazard(
                        self,
                        ins_idx,
                        "mfma",
                        f"[mfma-result-read] v{r} is an MFMA result only {ws - td[0] - 1} wait states old"
                        f" (needs {td[1]})",
                    )
            if meta.cls == "valu":
                for r in meta.vwrites:
                    td = self.mfma_srcc.get(r)
                    if td is not None and ws - td[0] - 1 < td[1]:
                        wg.hazard(
                            self,
                            ins_idx,
                            "mfma",
                            f"[mfma-srcc-war] v{r} overwritten {ws - td[0] - 1} wait states after an MFMA"
                            f" read it as SrcC (needs {td[1]})",
                        )

    def after(self, meta: Meta) -> None:
        ws = self.ws
        if meta.cls == "mfma":
            res = (ws, mfma_result_ws(meta.mfma_passes))
            war = (ws, mfma_srcc_war_ws(meta.mfma_passes))
            overlap = (meta.vwrites, wait("mfma-srcc-overlap", meta.mfma_passes))
            for r in meta.vwrites:
                self.mfma_dst[r] = res
                self.mfma_tuple[r] = overlap
            for r in meta.mfma_c:
                self.mfma_srcc[r] = war
            # Instructions this close to the last MFMA are checked against every recorded one.
            self.mfma_window = max(res[1], self.last_mfma_ws + self.mfma_window - ws)
            self.last_mfma_ws = ws
            self.issued_mfma = True
        elif meta.cls == "valu":
            for r in meta.vwrites:
                self.valu_write[r] = ws
            if EXEC in meta.swrites or EXEC + 1 in meta.swrites:
                self.valu_exec_ws = ws
        self.ws = ws + meta.wait_states

    # ---- run ----
    def run(self) -> str:
        """Runs until s_barrier ("barrier") or s_endpgm ("end")."""
        prog = self.wg.launch.program
        metas = self.wg.launch.metas
        counts = self.wg.launch.counts
        checking = self.wg.launch.check_hazards
        rec = self.rec
        pc = self.pc
        n = len(prog)
        while True:
            if pc >= n:
                raise EmuFault(f"wave {self.id} ran off the end of the kernel")
            meta = metas[pc]
            self.pc = pc
            if checking:
                self.check(pc, meta)
            if rec is not None:
                rec.append(pc)
            r = prog[pc](self)
            counts[pc] += 1
            self.after(meta)
            if r is None:
                pc += 1
            elif r >= 0:
                pc = r
            elif r == -1:
                if checking and any(p.kind == "lds-write" for p in self.lgkm_queue):
                    # The barrier orders issue, not completion: another wave may read the old data.
                    self.wg.hazard(
                        self,
                        pc,
                        "lds-barrier",
                        "s_barrier while this wave's LDS writes are not covered by s_waitcnt lgkmcnt",
                    )
                self.pc = pc + 1
                return "barrier"
            else:
                self.done = True
                self.pc = pc
                return "end"


class Workgroup:
    def __init__(self, launch: Launch, wg_id: tuple[int, int, int]) -> None:
        self.launch = launch
        self.id = wg_id
        self.lds_size = launch.kernel.descriptor.group_segment_size
        self.lds = np.full(LDS_BYTES // 4, VGPR_POISON, dtype=np.uint32)
        n = self.lds.size
        self.w_wave = np.full(n, -1, dtype=np.int16)
        self.w_epoch = np.full(n, -1, dtype=np.int32)
        self.r_mask = np.zeros(n, dtype=np.uint16)
        self.r_epoch = np.full(n, -1, dtype=np.int32)

    def hazard(self, wave: Wave, ins_idx: int, kind: str, detail: str) -> None:
        ins = self.launch.kernel.instructions[ins_idx]
        h = Hazard(kind, self.launch.kernel.name, self.id, wave.id, ins.addr, ins.text, detail)
        self.launch.hazards.append(h)
        if self.launch.strict and kind not in self.launch.lenient:
            raise EmuHazard(str(h))

    def check_lds(self, wave: Wave, idx: np.ndarray, *, write: bool) -> None:
        if not self.launch.check_hazards:
            return
        ep, me = wave.epoch, wave.id
        other_w = (self.w_epoch[idx] == ep) & (self.w_wave[idx] != me) & (self.w_wave[idx] >= 0)
        if write:
            other_r = (self.r_epoch[idx] == ep) & ((self.r_mask[idx] & ~np.uint16(1 << me)) != 0)
            if other_w.any() or other_r.any():
                bad = int(idx[other_w | other_r][0])
                self.hazard(
                    wave,
                    wave.pc,
                    "lds-race",
                    f"LDS byte {4 * bad} written while another wave accesses it in the same barrier interval",
                )
            self.w_wave[idx] = me
            self.w_epoch[idx] = ep
        else:
            if other_w.any():
                bad = int(idx[other_w][0])
                self.hazard(
                    wave,
                    wave.pc,
                    "lds-race",
                    f"LDS byte {4 * bad} read after wave {int(self.w_wave[bad])} wrote it (no s_barrier)",
                )
            if (self.w_wave[idx] < 0).any():
                bad = int(idx[self.w_wave[idx] < 0][0])
                self.hazard(wave, wave.pc, "lds-race", f"LDS byte {4 * bad} read but never written")
            stale = self.r_epoch[idx] != ep
            self.r_mask[idx[stale]] = 0
            self.r_epoch[idx] = ep
            self.r_mask[idx] |= np.uint16(1 << me)

    def run(self, waves: int) -> None:
        ws = [Wave(self, i) for i in range(waves)]
        kd = self.launch.kernel.descriptor
        for w in ws:
            for name, first, _n in kd.user_sgpr_layout():
                if name != "kernarg_segment_ptr":
                    raise EmuFault(f"user SGPR {name} is not provided by this emulator")
                w.s[first], w.s[first + 1] = self.launch.kernarg_addr & M32, self.launch.kernarg_addr >> 32
            at = kd.user_sgpr_count
            for axis, on in enumerate(kd.workgroup_id_enabled):
                if on:
                    w.s[at] = self.id[axis]
                    at += 1
            # Work-item ids: gfx90a+ packs x | y << 10 | z << 20 into v0; this launch is 1-D.
            w.v[0] = np.arange(64, dtype=np.uint32) + np.uint32(64 * w.id)
            w.sset64(EXEC, M64)
            w.s[VCC] = w.s[VCC + 1] = 0
        live = list(ws)
        while live:
            for w in live:
                w.run()
            live = [w for w in live if not w.done]
            for w in live:
                w.epoch += 1
        if self.launch.record:
            self.launch.records.append([(w.rec or [], w.lds_log) for w in ws])
        t = self.launch.trace
        t.waves += waves
        t.active_waves += sum(w.issued_mfma for w in ws)


WorkgroupRecord = list[tuple[list[int], dict[int, int]]]  # per wave: issued pcs, LDS cycles by position
_RECORDING: ContextVar[list[tuple[Kernel, list[WorkgroupRecord]]] | None] = ContextVar(
    "recording", default=None
)


@contextmanager
def recording() -> Iterator[list[tuple[Kernel, list[WorkgroupRecord]]]]:
    """Every Launch run inside the block records its waves (as record=True) and appends
    (kernel, records) to the yielded list, in launch order: a caller that does not build the Launch
    itself (a peer's host code) gets the records unchanged."""
    sink: list[tuple[Kernel, list[WorkgroupRecord]]] = []
    token = _RECORDING.set(sink)
    try:
        yield sink
    finally:
        _RECORDING.reset(token)


class Launch:
    """One dispatch of `kernel` over grid (x, y, 1) of workgroups of `block` threads."""

    def __init__(
        self,
        kernel: Kernel,
        memory: Memory,
        kernarg: bytes,
        *,
        strict: bool = True,
        check_hazards: bool = True,
        record: bool = False,
        entry_addr: int = 0,
        lenient: tuple[str, ...] = (),
    ) -> None:
        """`lenient`: hazard kinds collected but never raised even when strict (a peer's hand-written
        code may rely on timing finer than the rule, e.g. the order an MFMA writes its passes)."""
        kd = kernel.descriptor
        if kd.wave32:
            raise EmuFault(f"{kernel.name} is a wave32 kernel; gfx942 runs wave64")
        # Modelled fp32 modes: round to nearest even; denormals kept (3) or flushed (0, AITER's
        # objects); IEEE mode on or off (the same results for the quiet NaNs inputs can hold).
        if kd.float_denorm_mode_32 not in (0, 3) or kd.float_round_mode_32 != 0:
            raise EmuFault(
                f"{kernel.name}: fp32 mode (denorm {kd.float_denorm_mode_32}, "
                f"round {kd.float_round_mode_32}) is not a modelled one"
            )
        if kd.private_segment_enabled and any(
            n == "private_segment_buffer" for n, _, _ in kd.user_sgpr_layout()
        ):
            raise EmuFault(
                f"{kernel.name} addresses scratch through a segment buffer; only flat scratch is provided"
            )
        if len(kernarg) != kernel.kernarg_size:
            raise EmuFault(
                f"{kernel.name}: kernarg is {len(kernarg)} B, the kernel says {kernel.kernarg_size}"
            )
        self.kernel = kernel
        self.ftz = kd.float_denorm_mode_32 == 0
        self.memory = memory
        # Where the kernel's first instruction sits in the loaded image (s_getpc_b64); 0 when the
        # code object is not mapped into `memory` (codeobject.load_image and the caller do that).
        self.entry_addr = entry_addr
        self.strict = strict
        self.lenient = lenient
        self.check_hazards = check_hazards
        self.hazards: list[Hazard] = []
        self.trace = Trace()
        # record=True (or a recording() block around the launch) keeps, per workgroup, each wave's
        # issued pcs and LDS cycles, for regress.emu.timing.
        self._sink = _RECORDING.get()
        self.record = record or self._sink is not None
        self.records: list[WorkgroupRecord] = []
        self._kernarg = np.frombuffer(bytearray(kernarg), dtype=np.uint8).copy()
        self.kernarg_addr = self._kernarg.ctypes.data
        memory.map(self.kernarg_addr, self._kernarg)
        self.program, self.metas = compiled(kernel)
        self.counts = np.zeros(len(self.program), dtype=np.int64)

    def run(self, grid: tuple[int, ...], block: int) -> Trace:
        """Runs workgroups (x, y[, z]) in order, x fastest."""
        if block % 64 or not 0 < block <= int(self.kernel.metadata.get(".max_flat_workgroup_size", 1024)):
            raise EmuFault(f"block of {block} threads does not suit {self.kernel.name}")
        # IEEE results (NaN, Inf, underflow) are the modelled behaviour, not warnings.
        with np.errstate(all="ignore"):
            gx, gy, gz = (*grid, 1, 1)[:3]
            for z in range(gz):
                for y in range(gy):
                    for x in range(gx):
                        Workgroup(self, (x, y, z)).run(block // 64)
        self.trace.instructions = int(self.counts.sum())
        for i, c in enumerate(self.counts):
            if c:
                m = self.metas[i]
                self.trace.issued[m.cls] += int(c)
                if m.cls == "nop":
                    self.trace.nop_wait_states += int(c) * m.wait_states
        if self._sink is not None:
            self._sink.append((self.kernel, self.records))
        return self.trace


def compiled(kernel: Kernel) -> tuple[list[Exec], list[Meta]]:
    """The kernel's instructions as closures, compiled once and kept on the Kernel object."""
    if kernel.compiled is None:
        index_of = {ins.addr: i for i, ins in enumerate(kernel.instructions)}
        ftz = kernel.descriptor.float_denorm_mode_32 == 0
        pairs = []
        for ins in kernel.instructions:
            try:
                pairs.append(compile_instruction(ins, index_of, ftz=ftz))
            except UnsupportedInstruction as e:
                # Name the instruction and where it is: the object's file, the kernel, the offset.
                where = f"{kernel.source}: " if kernel.source else ""
                raise UnsupportedInstruction(
                    f"{where}kernel {kernel.name} at +0x{ins.addr:x}: `{ins.text}` is not emulated ({e})"
                ) from None
        kernel.compiled = ([p[0] for p in pairs], [p[1] for p in pairs])
    return kernel.compiled  # type: ignore[no-any-return]


assert set(CLASSES) >= {
    "mfma",
    "valu",
    "lds",
    "global",
    "smem",
    "salu",
    "branch",
    "nop",
    "waitcnt",
    "barrier",
}
