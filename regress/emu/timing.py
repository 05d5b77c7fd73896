"""A cycle-approximate timing model of one CDNA3 compute unit, replaying the emulator's waves.

The emulator (regress.emu.machine) executes a launch functionally; with `record=True` every wave keeps
the instructions it issued, in order, and the LDS bank cycles of each LDS access. Control flow never
depends on timing (waves synchronise only at s_barrier), so the timing of one CU is a replay of those
streams through a model of its issue logic and pipelines (every constant: regress.emu.cdna3):

- 4 SIMDs; wave i of a workgroup sits on SIMD i mod 4. Each SIMD has an issue opportunity every
  4 clocks; at one it issues at most one instruction per wave and one per unit class (VALU incl.
  MFMA, scalar ALU/memory, vector memory, LDS, branch), choosing among ready waves by s_setprio
  priority, then oldest first. s_nop, s_waitcnt, s_setprio, s_barrier are sequencer instructions.
- VALU: 4 clocks per wave64 op, quarter-rate ops (transcendentals, 32-bit integer multiplies) 16.
- MFMA: the SIMD's matrix core is busy passes x 4 clocks (matrix instruction calculator); the VALU
  port is taken for one issue cycle only, so independent VALU work co-issues under an MFMA. A chained
  MFMA (SrcC = the previous D) waits for the core; other dependencies are the code's own s_nops.
- Memory: vector memory ops are served by the CU's L1 at l1_bytes_per_clk, then return after
  vmem_latency, in order; LDS ops occupy the CU's LDS for their bank-conflict cycles (the machine's
  bank model) and return lds_latency later, in order; scalar loads return after smem_latency.
  s_waitcnt vmcnt/lgkmcnt stalls the wave until enough have returned.

Every clock a wave spends is booked to one bucket (`CuRun.waves_cost`): the issue cycles of each
instruction class, s_nop wait states, waits on vmcnt/lgkmcnt, s_barrier, a busy matrix core, a busy
VALU (quarter-rate ops), or losing arbitration to another wave.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from regress.emu.cdna3 import MFMA_PASSES, PACKED_F32, QUARTER_RATE, C
from regress.emu.codeobject import Instr, Kernel

# Op kinds (small ints: the replay loop is the model's hot path).
VALU, MFMA, SALU, SMEM, VMEM, LDS, BRANCH, NOP, WAIT, BARRIER, PRIO, END = range(12)
KIND_NAMES = (
    "valu",
    "mfma",
    "salu",
    "smem",
    "vmem",
    "lds",
    "branch",
    "nop",
    "waitcnt",
    "barrier",
    "prio",
    "end",
)
# The unit class an op takes at an issue opportunity; None: a sequencer instruction.
UNIT = {VALU: 0, MFMA: 0, SALU: 1, SMEM: 1, VMEM: 2, LDS: 3, BRANCH: 4}
_MAY_HOLD = frozenset({VALU, MFMA, WAIT})  # the kinds whose issue waits on a pipeline or a counter
RecordT = tuple[list[int], dict[int, int]]


class TimingError(RuntimeError):
    """The timing model has no rate for an instruction the kernel issues."""


@dataclass(frozen=True)
class Op:
    kind: int
    # VALU: 1 for a quarter-rate op, 2 for a packed-F32 or DOT op; MFMA: passes; NOP: wait states;
    # WAIT: vmcnt; PRIO: level; VMEM: bytes
    arg: int = 0
    arg2: int = 0  # WAIT: lgkmcnt; VMEM: 1 for a direct-to-LDS load
    target: int = -1  # branch target index
    straddle: bool = False  # its bytes cross a fetch window (cdna3 fetch_window_bytes)


_DW = {"byte": 1, "ubyte": 1, "sbyte": 1, "short": 2, "ushort": 2, "sshort": 2, "dword": 4}


def _vmem_bytes(name: str) -> int:
    """Bytes one wave64 moves: 64 lanes x the access size in the mnemonic."""
    m = re.search(r"_(dwordx(\d)|dword|b(\d+)|u?byte|sbyte|u?short|sshort|d16\w*)", name)
    if not m:
        return 64 * 4
    if m.group(2):
        return 64 * 4 * int(m.group(2))
    if m.group(3):
        return 64 * int(m.group(3)) // 8
    return 64 * _DW.get(m.group(1), 2)


def static_ops(kernel: Kernel) -> list[Op]:
    """The timing facts of every instruction of `kernel` (index-aligned with kernel.instructions)."""
    index_of = {ins.addr: i for i, ins in enumerate(kernel.instructions)}
    window = int(C["fetch_window_bytes"])
    ops: list[Op] = []
    for ins in kernel.instructions:
        if ins.addr % window + ins.size > window:
            ops.append(dataclasses.replace(_op(kernel, ins, index_of), straddle=True))
        else:
            ops.append(_op(kernel, ins, index_of))
    return ops


def _op(kernel: Kernel, ins: Instr, index_of: dict[int, int]) -> Op:
    """The timing facts of one instruction."""
    name = re.sub(r"_e(32|64)$", "", ins.mnemonic)
    if name.startswith("v_mfma"):
        if name not in MFMA_PASSES:
            raise TimingError(f"{kernel.name}: no MFMA rate for {name} (regress/emu/cdna3.py)")
        return Op(MFMA, MFMA_PASSES[name])
    elif name.startswith("v_"):
        packed = name in PACKED_F32 or name.startswith("v_dot")
        return Op(VALU, 1 if name in QUARTER_RATE else 2 if packed else 0)
    elif name.startswith("ds_"):
        return Op(LDS)
    elif name.startswith(("global_", "buffer_", "flat_", "scratch_")):
        # arg2 = 1: the load writes LDS, not VGPRs (buffer_load ... lds), and takes LDS bandwidth.
        return Op(VMEM, _vmem_bytes(name), int("lds" in ins.modifiers))
    elif name.startswith(("s_load", "s_buffer_load", "s_store", "s_dcache")):
        return Op(SMEM)
    elif name == "s_nop":
        return Op(NOP, int(ins.operands[0], 0) + 1)
    elif name == "s_waitcnt":
        vm, lgkm = 63, 15
        for o in ins.operands:
            if m := re.match(r"vmcnt\((\d+)\)", o):
                vm = int(m.group(1))
            elif m := re.match(r"lgkmcnt\((\d+)\)", o):
                lgkm = int(m.group(1))
        return Op(WAIT, vm, lgkm)
    elif name == "s_barrier":
        return Op(BARRIER)
    elif name == "s_setprio":
        return Op(PRIO, int(ins.operands[0], 0))
    elif name == "s_endpgm":
        return Op(END)
    elif name == "s_branch" or name.startswith("s_cbranch"):
        tgt = ins.branch_target
        return Op(BRANCH, target=index_of.get(tgt, -1) if tgt is not None else -1)
    else:
        return Op(SALU)


# --- occupancy -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Occupancy:
    vgprs: int  # VGPR + AGPR per lane, as allocated
    waves_per_simd: int
    wgs_per_cu: int
    limit: str  # "vgpr", "lds" or "slots"


# Constants read from C once (at import, or for the occupancy a recording is made with, which is cached
# across parameter sets), never from a `params` set: a sensitivity run cannot change them.
NOT_PARAMS = frozenset(
    {
        "simds",
        "waves_per_simd_max",
        "vgprs_per_lane",
        "vgpr_granule",
        "sgprs_per_simd",
        "sgpr_granule",
        "lds_bytes",
        "fetch_window_bytes",
        "mfma_16x16x16_bf16_passes",
        "mfma_32x32x8_bf16_passes",
        "mfma_valu_read_extra_ws",
        "mall_tb_s",
        "boost_headroom",
    }
)


# The constants replay() reads: a parameter set's steady states depend on these alone (the clock's,
# the device's counts and bandwidths enter only launch_time), so a cache keyed by them survives a
# sweep of the clock parameters.
REPLAY_PARAMS = frozenset(
    {
        "issue_clocks",
        "mfma_pass_clocks",
        "vmem_latency",
        "lds_latency",
        "smem_latency",
        "l1_bytes_per_clk",
        "lds_bytes_per_clk",
        "branch_issue_cycles",
        "barrier_clocks",
        "mfma_valu_block",
        "mfma_own_valu_block",
        "trans_issue_cycles",
        "mfma_valu_hold_cycles",
        "mfma_valu_hold_cycles_8pass",
        "mfma_pk_f32_extra_cycles",
        "mfma_pk_f32_simd_wide",
        "fetch_straddle_cycles",
    }
)


def occupancy(kernel: Kernel, block: int) -> Occupancy:
    kd = kernel.descriptor
    granule = int(C["vgpr_granule"])
    vgprs = ((kd.rsrc1 & 0x3F) + 1) * granule
    simds = int(C["simds"])
    sgprs = (((kd.rsrc1 >> 6) & 0xF) + 1) * int(C["sgpr_granule"])
    by_vgpr = min(int(C["waves_per_simd_max"]), int(C["vgprs_per_lane"]) // vgprs)
    by_vgpr = min(by_vgpr, int(C["sgprs_per_simd"]) // sgprs)  # SGPRs rarely bind (800 per SIMD)
    waves = block // 64
    per_simd = -(-waves // simds)  # wave slots one workgroup takes on each SIMD
    wg_vgpr = by_vgpr // per_simd
    wg_lds = int(C["lds_bytes"]) // kd.group_segment_size if kd.group_segment_size else 10**9
    wgs = min(wg_vgpr, wg_lds)
    if wgs < 1:
        raise TimingError(f"{kernel.name}: a {block}-thread workgroup does not fit one CU")
    limit = "lds" if wg_lds < wg_vgpr else "vgpr"
    return Occupancy(vgprs, by_vgpr, wgs, limit)


# --- the replay -----------------------------------------------------------------------------------


@dataclass
class CuRun:
    """One CU's replay: its end time and where every wave's clocks went."""

    clocks: int
    waves: int
    xdl_busy: list[int]  # per SIMD, clocks the matrix core was busy
    valu_busy: list[int]
    lds_busy: int
    vmem_busy: int
    waves_cost: Counter[str] = field(default_factory=Counter)  # summed over waves, clocks
    issued: Counter[str] = field(default_factory=Counter)
    wave_end: list[int] = field(default_factory=list)  # per wave, the clock its last result landed
    # Matrix-core busy clocks summed over SIMDs, by MFMA flavour (its pass count: 4 is 16x16x16, 8 is
    # 32x32x8): the power model's input (clock_ghz), since the flavours draw different power.
    xdl_by_passes: Counter[int] = field(default_factory=Counter)

    @property
    def mfma_busy(self) -> float:
        return sum(self.xdl_busy) / (len(self.xdl_busy) * self.clocks) if self.clocks else 0.0


class _Wave:
    __slots__ = (
        "age",
        "barrier",
        "done",
        "end",
        "i",
        "lds",
        "lgkm",
        "n",
        "pcs",
        "pk_at",
        "prio",
        "ready",
        "reason",
        "simd",
        "since",
        "valu_at",
        "vm",
        "wg",
    )

    def __init__(self, rec: RecordT, simd: int, age: int, wg: int) -> None:
        self.pcs, self.lds = rec
        self.i = 0
        self.n = len(self.pcs)
        self.ready = 0  # earliest clock of its next issue
        self.since = 0  # the clock from which the current wait is booked
        self.reason = "arbitration"
        self.simd = simd
        self.age = age
        self.prio = 0
        self.vm: list[int] = []  # completion clocks of outstanding vector memory ops, issue order
        self.lgkm: list[int] = []  # LDS and scalar memory ops
        self.wg = wg
        self.barrier = False
        self.done = self.n == 0
        self.end = 0
        self.valu_at = 0  # its own last MFMA holds this wave's VALU issue until then (see own_block)
        self.pk_at = 0  # ... and its packed-F32 VALU ops until then


@dataclass(frozen=True)
class _Rates:
    """The constants one replay reads (REPLAY_PARAMS of a parameter set), in the units the loop uses."""

    issue: int  # clocks between a SIMD's issue opportunities
    simds: int
    pass_clk: int
    vmem_lat: int
    lds_lat: int
    smem_lat: int
    l1_bpc: float
    lds_bpc: float
    branch_cycles: int
    barrier_clk: int
    block_share: float
    own_block: float
    trans_cycles: int
    hold_cycles: int
    hold_cycles_8: int
    pk_extra: int
    pk_simd: bool
    straddle_clk: int

    @classmethod
    def of(cls, p: dict[str, float]) -> _Rates:
        issue = int(p["issue_clocks"])
        return cls(
            issue=issue,
            simds=int(p["simds"]),
            pass_clk=int(p["mfma_pass_clocks"]),
            vmem_lat=round(p["vmem_latency"]),
            lds_lat=round(p["lds_latency"]),
            smem_lat=int(p["smem_latency"]),
            l1_bpc=p["l1_bytes_per_clk"],
            lds_bpc=p["lds_bytes_per_clk"],
            branch_cycles=int(p["branch_issue_cycles"]),
            barrier_clk=int(p["barrier_clocks"]),
            block_share=p["mfma_valu_block"],
            own_block=p["mfma_own_valu_block"],
            trans_cycles=int(p["trans_issue_cycles"]),
            hold_cycles=int(p["mfma_valu_hold_cycles"]),
            hold_cycles_8=int(p["mfma_valu_hold_cycles_8pass"]),
            pk_extra=int(p["mfma_pk_f32_extra_cycles"]),
            pk_simd=bool(p["mfma_pk_f32_simd_wide"]),
            straddle_clk=int(p["fetch_straddle_cycles"]) * issue,
        )


class _Units:
    """The CU's shared pipelines, when each is next free and how long each was busy: per SIMD its
    VALU port, matrix core and packed-F32 window; per CU its LDS and vector memory path. Also the
    clocks every wave spent, by bucket, and the instructions issued, by kind."""

    def __init__(self, simds: int) -> None:
        self.valu_free = [0] * simds
        self.xdl_free = [0] * simds
        self.pk_free = [0] * simds  # pk_simd: a packed-F32 VALU op may issue from here (the SIMD's last MFMA)
        self.xdl_busy = [0] * simds
        self.xdl_by_passes: Counter[int] = Counter()
        self.valu_busy = [0] * simds
        self.lds_free = 0
        self.vmem_free = 0
        self.lds_busy = 0
        self.vmem_busy = 0
        self.cost: Counter[str] = Counter()
        self.issued: Counter[str] = Counter()


def _held(w: _Wave, op: Op, s: int, t: int, u: _Units, r: _Rates) -> bool:
    """Whether a VALU, MFMA or s_waitcnt of wave `w` on SIMD `s` must wait at clock `t` (a busy port,
    its own MFMA, the matrix core, outstanding memory); books why and, where known, until when."""
    k = op.kind
    if k == WAIT:
        need = t
        if len(w.vm) > op.arg:
            need = max(need, w.vm[len(w.vm) - op.arg - 1])
        if len(w.lgkm) > op.arg2:
            srt = sorted(w.lgkm)
            need = max(need, srt[len(srt) - op.arg2 - 1])
        if need > t:
            vm_need = w.vm[len(w.vm) - op.arg - 1] if len(w.vm) > op.arg else 0
            w.reason = "wait vmcnt" if vm_need >= need else "wait lgkmcnt"
            w.ready = -(-need // r.issue) * r.issue
            return True
        return False
    if u.valu_free[s] > t:
        w.reason = "valu busy"
        return True
    if k == VALU and w.valu_at > t:
        w.ready = w.valu_at
        w.reason = "own MFMA"
        return True
    if k == VALU and op.arg == 2 and (pk := u.pk_free[s] if r.pk_simd else w.pk_at) > t:
        w.ready = pk
        w.reason = "packed f32 behind MFMA"
        return True
    if k == MFMA and u.xdl_free[s] > t:
        w.ready = u.xdl_free[s]
        w.reason = "matrix core busy"
        return True
    return False


def _issue(w: _Wave, op: Op, s: int, t: int, u: _Units, r: _Rates) -> int:
    """Issues `op` of wave `w` at clock `t`: books the pipelines it occupies, the memory results it
    will return, the clocks the wave waited for it; returns the clocks the wave is busy issuing it."""
    k = op.kind
    issue = r.issue
    cost = u.cost
    cost[w.reason] += t - w.since
    own = issue
    if k == VALU:
        busy = issue * (r.trans_cycles if op.arg == 1 else 1)
        u.valu_free[s] = t + busy
        u.valu_busy[s] += busy
        cost["valu"] += issue
    elif k == MFMA:
        busy = op.arg * r.pass_clk
        # The VALU port: its hold cycles, plus the share of the MFMA's run it cannot co-issue.
        hold = (r.hold_cycles_8 if op.arg >= 8 else r.hold_cycles) * issue
        u.valu_free[s] = t + hold + round(r.block_share * (busy - hold))
        u.pk_free[s] = max(u.pk_free[s], t + (op.arg + r.pk_extra) * issue)
        w.pk_at = t + (op.arg + r.pk_extra) * issue
        w.valu_at = t + issue + round(r.own_block * (busy - issue))
        u.xdl_free[s] = t + busy
        u.xdl_busy[s] += busy
        u.xdl_by_passes[op.arg] += busy
        cost["mfma"] += issue
    elif k == LDS:
        cyc = w.lds.get(w.i, 2)
        start = max(t, u.lds_free)
        u.lds_free = start + cyc
        u.lds_busy += cyc
        done = start + cyc + r.lds_lat
        w.lgkm = [c for c in w.lgkm if c > t]
        w.lgkm.append(max(done, w.lgkm[-1]) if w.lgkm else done)
        cost["lds"] += issue
    elif k == VMEM:
        cyc = math.ceil(op.arg / r.l1_bpc)
        start = max(t, u.vmem_free)
        u.vmem_free = start + cyc
        u.vmem_busy += cyc
        done = start + cyc + r.vmem_lat
        if op.arg2:  # the dwords are written into LDS: its bandwidth, booked at issue
            lcyc = math.ceil(op.arg / r.lds_bpc)
            u.lds_free = max(u.lds_free, t) + lcyc
            u.lds_busy += lcyc
        w.vm = [c for c in w.vm if c > t]
        w.vm.append(max(done, w.vm[-1]) if w.vm else done)
        cost["vmem"] += issue
    elif k == SMEM:
        w.lgkm = [c for c in w.lgkm if c > t]
        w.lgkm.append(t + r.smem_lat)
        cost["salu"] += issue
    elif k == SALU:
        cost["salu"] += issue
    elif k == BRANCH:
        taken = w.i + 1 < w.n and w.pcs[w.i + 1] != w.pcs[w.i] + 1
        own = issue * (r.branch_cycles if taken else 1)
        cost["branch"] += own
    elif k == NOP:
        own = issue * op.arg
        cost["s_nop"] += own
    elif k == WAIT:
        w.vm = [c for c in w.vm if c > t]
        w.lgkm = [c for c in w.lgkm if c > t]
        cost["waitcnt"] += issue
    elif k == PRIO:
        w.prio = op.arg
        cost["salu"] += issue
    elif k == BARRIER:
        cost["barrier"] += issue
    if op.straddle and r.straddle_clk:  # its second fetch window arrives a quad later
        own += r.straddle_clk
        cost["fetch"] += r.straddle_clk
    u.issued[KIND_NAMES[k]] += 1
    return own


class _Barriers:
    """s_barrier per workgroup: a wave that reaches one waits until every live wave of its workgroup
    has; then all of them go on `barrier_clk` later. A wave that ends no longer counts."""

    def __init__(self, waves: list[_Wave], barrier_clk: int) -> None:
        self.waves = waves
        self.clk = barrier_clk
        self.live = Counter(w.wg for w in waves if not w.done)
        self.arrived: Counter[int] = Counter()

    def arrive(self, w: _Wave, t: int) -> None:
        w.barrier = True
        w.reason = "barrier"
        self.arrived[w.wg] += 1
        if self.arrived[w.wg] == self.live[w.wg]:
            self._release(w.wg, t + self.clk)

    def leave(self, w: _Wave, t: int) -> None:
        self.live[w.wg] -= 1
        if self.arrived[w.wg] and self.arrived[w.wg] == self.live[w.wg]:
            self._release(w.wg, t + self.clk)

    def _release(self, g: int, when: int) -> None:
        for w in self.waves:
            if w.wg == g and w.barrier:
                w.barrier = False
                w.ready = max(w.ready, when)
                w.reason = "barrier"
        self.arrived[g] = 0


def replay(
    kernel: Kernel, workgroups: Sequence[Sequence[RecordT]], params: dict[str, float] | None = None
) -> CuRun:
    """Runs the recorded waves of `workgroups`, all resident on one CU from clock 0: the issue loop.
    Every issue opportunity each SIMD offers its ready waves, by priority then age, one instruction
    per wave and per unit class; `_held` says which must wait, `_issue` books what an issue costs,
    `_Barriers` holds waves at s_barrier."""
    r = _Rates.of(C | (params or {}))
    ops = static_ops_cached(kernel)
    issue, simds = r.issue, r.simds
    waves: list[_Wave] = []
    for g, wg in enumerate(workgroups):
        for k, rec in enumerate(wg):
            waves.append(_Wave(rec, k % simds, len(waves), g))
    by_simd = [[w for w in waves if w.simd == s] for s in range(simds)]
    barriers = _Barriers(waves, r.barrier_clk)
    u = _Units(simds)
    live = sum(not w.done for w in waves)
    t = 0
    while live:
        any_issue = False
        for s in range(simds):
            cands = [w for w in by_simd[s] if not w.done and not w.barrier and w.ready <= t]
            if not cands:
                continue
            if len(cands) > 1:
                cands.sort(key=lambda w: (-w.prio, w.age))
            used = 0
            for w in cands:
                op = ops[w.pcs[w.i]]
                k = op.kind
                unit = UNIT.get(k)
                if unit is not None and used >> unit & 1:
                    w.reason = "arbitration"
                    continue
                if k in _MAY_HOLD and _held(w, op, s, t, u, r):
                    continue
                if unit is not None:
                    used |= 1 << unit
                own = _issue(w, op, s, t, u, r)
                any_issue = True
                w.i += 1
                w.ready = t + own
                w.since = t + own
                w.reason = "arbitration"
                if k == BARRIER:
                    barriers.arrive(w, t)
                if k == END or w.i >= w.n:
                    w.done = True
                    w.end = max([t + own, *w.vm, *w.lgkm])
                    live -= 1
                    barriers.leave(w, t)
        if any_issue:
            t += issue
        else:
            pending = [w.ready for w in waves if not w.done and not w.barrier]
            if not pending:
                raise TimingError(
                    f"{kernel.name}: every live wave waits at s_barrier and none can release it"
                )
            t = max(t + issue, -(-min(pending) // issue) * issue)
    clocks = max((w.end for w in waves), default=0)
    return CuRun(
        clocks,
        len(waves),
        u.xdl_busy,
        u.valu_busy,
        u.lds_busy,
        u.vmem_busy,
        u.cost,
        u.issued,
        [w.end for w in waves],
        u.xdl_by_passes,
    )


_OPS: dict[int, tuple[Kernel, list[Op]]] = {}


def static_ops_cached(kernel: Kernel) -> list[Op]:
    """static_ops, once per Kernel object (the entry holds the kernel, so its id is not reused)."""
    hit = _OPS.get(id(kernel))
    if hit is None or hit[0] is not kernel:
        hit = _OPS[id(kernel)] = (kernel, static_ops(kernel))
    return hit[1]


# --- steady state and the whole kernel --------------------------------------------------------------


@dataclass(frozen=True)
class SteadyState:
    """One CU running `resident` workgroups of a kernel: clocks = fixed + per_tile x tiles."""

    kernel: str
    resident: int
    fixed: float
    per_tile: float
    mfma_busy: float  # matrix-core busy share in steady state
    cost_per_tile: dict[str, float]  # clocks per tile per wave, by bucket
    issued_per_tile: dict[str, float]  # instructions per tile per wave
    # Extra clocks per tile when every tile raises a running row max (a kernel whose code skips the
    # rescale unless the max rises pays this on Grid.rise_rate of its tiles; 0 for branch-free code).
    rise_per_tile: float = 0.0
    # Matrix-core busy share in steady state by MFMA flavour (pass count -> share of SIMD clocks).
    mfma_busy_by_passes: dict[int, float] = field(default_factory=dict)


def steady_state(
    record: Callable[[int], tuple[Kernel, list[list[RecordT]]]],
    tiles: tuple[int, int] = (2, 4),
    params: dict[str, float] | None = None,
) -> SteadyState:
    """`record(n)` runs the emulator for workgroups of n key tiles each (as many as reside on one CU)
    and returns their records; two sizes give the fixed and the per-tile clocks."""
    (n1, n2) = tiles
    k1, r1 = record(n1)
    k2, r2 = record(n2)
    a, b = replay(k1, r1, params), replay(k2, r2, params)
    dn = n2 - n1
    per = (b.clocks - a.clocks) / dn
    nw = b.waves
    xdl = (sum(b.xdl_busy) - sum(a.xdl_busy)) / dn
    cost = {k: (b.waves_cost[k] - a.waves_cost[k]) / dn / nw for k in b.waves_cost | a.waves_cost}
    iss = {k: (b.issued[k] - a.issued[k]) / dn / nw for k in b.issued | a.issued}
    simds = int(C["simds"])
    by_passes = {
        k: (b.xdl_by_passes[k] - a.xdl_by_passes[k]) / dn / (simds * per) if per else 0.0
        for k in b.xdl_by_passes | a.xdl_by_passes
    }
    return SteadyState(
        kernel=k2.name,
        resident=len(r2),
        fixed=a.clocks - per * n1,
        per_tile=per,
        mfma_busy=xdl / (simds * per) if per else 0.0,
        cost_per_tile=cost,
        issued_per_tile=iss,
        mfma_busy_by_passes=by_passes,
    )


def one_round(
    record: Callable[[int], tuple[Kernel, list[list[RecordT]]]], params: dict[str, float] | None = None
) -> SteadyState:
    """A kernel without a key loop: one round of the workgroups `record(0)` returns, all resident."""
    k, r = record(0)
    run = replay(k, r, params)
    simds = int(C["simds"])
    by_passes = {n: v / (simds * run.clocks) for n, v in run.xdl_by_passes.items()} if run.clocks else {}
    return SteadyState(
        k.name, len(r), float(run.clocks), 0.0, run.mfma_busy, {}, {}, mfma_busy_by_passes=by_passes
    )


@dataclass(frozen=True)
class Grid:
    """One launch: `workgroups` of `tiles` key tiles each; bytes for the bandwidth bounds."""

    name: str
    workgroups: int
    tiles: int
    hbm_bytes: float  # compulsory traffic: every input read once, every output written once
    l2_bytes: float  # what all workgroups load (through L2)
    flops: float = 0.0
    # Share of the key tiles on which the workload raises a running row max (SteadyState.rise_per_tile).
    rise_rate: float = 0.0


@dataclass(frozen=True)
class LaunchTime:
    name: str
    ms: float
    bound: str  # "compute", "hbm" or "l2"
    compute_ms: float
    hbm_ms: float
    l2_ms: float
    rounds: int
    mfma_busy: float
    clock_ghz: float = 0.0  # the power-managed clock, time-weighted over the launch's rounds


# --- the power-managed clock ---------------------------------------------------------------------


def matrix_activity(st: SteadyState, params: dict[str, float] | None = None) -> float:
    """One CU's matrix-core activity in power terms: its busy share per MFMA flavour, each weighted by
    the flavour's power per busy clock relative to a 32x32x8 (AMD: 16x16x16 draws less)."""
    p = C | (params or {})
    w = {int(C["mfma_16x16x16_bf16_passes"]): p["mfma_power_16x16x16"]}
    return sum(share * w.get(passes, 1.0) for passes, share in st.mfma_busy_by_passes.items())


def clock_ghz(activity: float, params: dict[str, float] | None = None) -> float:
    """The sustained engine clock at a chip-wide matrix activity (CU activity x share of the CUs busy).

    A power cap holds dynamic power, ~ activity x f^(1/beta) along the DVFS curve, at the level AMD
    measured under dense BF16 GEMM (median `clock_gemm_ghz` at activity `gemm_mfma_busy`), so
    f = f_gemm x (A_gemm / A)^beta, never above the peak `clock_ghz` (a lightly loaded chip boosts)."""
    p = C | (params or {})
    peak = p["clock_ghz"]
    if activity <= 0:
        return peak
    # float ** float is typed Any (a negative base would give a complex); both are positive here
    capped: float = p["clock_gemm_ghz"] * (p["gemm_mfma_busy"] / activity) ** p["clock_beta"]
    return min(peak, capped)


def launch_time(
    grid: Grid,
    full: SteadyState,
    partial: Callable[[int], SteadyState] | None = None,
    params: dict[str, float] | None = None,
) -> LaunchTime:
    """Whole-launch time: full rounds of `full.resident` workgroups per CU over every CU, then the last
    partial round (fewer resident per CU when occupancy > 1), against the HBM and L2 bounds. Each
    round runs at the power-managed clock of its own activity: a partial round with fewer CUs busy
    runs faster (clock_ghz); `clock_eff` scales the issue rate for all the model misses."""
    p = C | (params or {})
    cus = int(p["cus"])
    eff = p["clock_eff"]
    per_round = cus * full.resident
    rounds, rest = divmod(grid.workgroups, per_round)

    def tile(st: SteadyState) -> float:
        return st.per_tile + grid.rise_rate * st.rise_per_tile

    def seconds(st: SteadyState, clocks: float, share: float) -> tuple[float, float]:
        ghz = clock_ghz(share * matrix_activity(st, p), p)
        return clocks / (ghz * 1e9 * eff), ghz

    phases: list[tuple[float, float]] = []
    if rounds:
        phases.append(seconds(full, rounds * (full.fixed + tile(full) * grid.tiles), 1.0))
    if rest:
        k = -(-rest // cus)
        st = full if k == full.resident or partial is None else partial(k)
        # the share of the round's workgroup slots that hold one (CUs left idle draw no MFMA power)
        phases.append(seconds(st, st.fixed + tile(st) * grid.tiles, rest / (cus * k)))
    secs = sum(t for t, _ in phases)
    ghz = sum(t * f for t, f in phases) / secs if secs else clock_ghz(0.0, p)
    compute = secs * 1e3
    hbm = grid.hbm_bytes / (p["hbm_tb_s"] * 1e12) * 1e3
    l2 = grid.l2_bytes / (p["l2_bytes_per_clk_xcd"] * p["xcds"] * ghz * 1e9 * eff) * 1e3
    ms = max(compute, hbm, l2)
    bound = "compute" if ms == compute else "hbm" if ms == hbm else "l2"
    return LaunchTime(grid.name, ms, bound, compute, hbm, l2, rounds + bool(rest), full.mfma_busy, ghz)
