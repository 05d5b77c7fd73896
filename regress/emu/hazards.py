"""The gfx942 MFMA hazard rules: one table, read by both checkers.

The compiler does not model MFMAs hidden in inline asm (kernel/hip/parts/mfma.h), so these wait
states are the kernel's to keep. The numbers are LLVM's GCNHazardRecognizer for gfx940-class
targets (checkMAIHazards90A, checkMAIVALUHazards), as functions of the earlier MFMA's pass count:
4 for the kernel's v_mfma_f32_16x16x16_bf16, 8 for v_mfma_f32_32x32x8_bf16 (both XDL ops); the
CDNA3 ISA guide's "required wait states" table gives the same numbers. A wait state is one issued
instruction; s_nop N is N + 1.

Two checkers read `RULES`:
  - the emulator (regress.emu.machine) on the path a launch really took, every instruction;
  - `scan`, here, on a kernel's instructions as the code object holds them (regress.emu.codeobject
    decodes them with llvm-objdump), which also sees code no test input reaches. It follows every
    path through the branches, both ways of a conditional one whatever the condition, so it is
    conservative where the emulator is exact; a jump it cannot follow (s_setpc, a target outside
    the kernel) inside a window is a finding of its own ("branch-in-window"), never a blind spot.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from regress.emu.codeobject import Instr
from regress.emu.isa import MFMA_PASSES


@dataclass(frozen=True)
class Rule:
    name: str
    first: str
    then: str
    formula: str  # the wait states, as LLVM states them, in the earlier MFMA's passes
    llvm: str  # where GCNHazardRecognizer states it

    def wait_states(self, passes: int = 4) -> int:
        return _WAITS[self.name](passes)


_WAITS: dict[str, Callable[[int], int]] = {
    "mfma-result-read": lambda p: p + 3,
    "mfma-result-srcab": lambda p: p + 3,
    "mfma-srcc-overlap": lambda p: p + 1,
    "valu-write-mfma-read": lambda p: 2,
    "exec-write-mfma": lambda p: 4,
    "mfma-srcc-war": lambda p: {2: 1, 4: 3, 8: 7}.get(p, 15),
}
RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule(
            "mfma-result-read",
            "MFMA writes a VGPR",
            "a non-MFMA instruction (VALU, memory) reads or writes it",
            "passes + 3",
            "GFX940_XDL_N_PassWriteVgprVALUMemExpReadWaitStates, ..._VALUWawWaitStates",
        ),
        Rule(
            "mfma-result-srcab",
            "MFMA writes a VGPR",
            "another MFMA reads it as SrcA or SrcB",
            "passes + 3",
            "GFX940_XDL_N_PassWritesVGPROverlappedSrcABWaitStates",
        ),
        Rule(
            "mfma-srcc-overlap",
            "MFMA writes VGPRs",
            "another MFMA reads a SrcC that overlaps them but is not the same registers",
            "passes + 1 (the same SrcC: 0)",
            "GFX940_XDL_N_PassWritesVGPROverlappedSMFMASrcCWaitStates",
        ),
        Rule(
            "valu-write-mfma-read",
            "a VALU writes a VGPR",
            "an MFMA reads it (A, B or C)",
            "2",
            "LegacyVALUNotDotWritesVGPRWaitStates",
        ),
        Rule(
            "exec-write-mfma",
            "a VALU writes EXEC (v_cmpx, v_readfirstlane exec_lo, ...)",
            "an MFMA issues",
            "4",
            "VALUWritesExecWaitStates",
        ),
        Rule(
            "mfma-srcc-war",
            "MFMA reads a VGPR as SrcC",
            "a VALU overwrites it",
            "3 at 4 passes, 7 at 8, 15 at 16",
            "GFX940_XDL4PassReadVgprVALUWarWaitStates, SMFMA16x16/32x32ReadVgprVALUWarWaitStates",
        ),
    )
}
BRANCH_RULE = "branch-in-window"  # the static scan's own: a jump it cannot follow


def wait(name: str, passes: int = 4) -> int:
    """The wait states rule `name` needs after (or before) an MFMA of `passes` passes."""
    return RULES[name].wait_states(passes)


def passes_of(mnemonic: str) -> int:
    """The pass count of an MFMA mnemonic (regress.emu.isa.MFMA_PASSES; 4 if unknown: the scan
    still checks an MFMA the emulator cannot run, at the kernel's own instruction's numbers)."""
    return MFMA_PASSES.get(re.sub(r"_e(32|64)$", "", mnemonic), 4)


BEFORE_WS = max(wait("valu-write-mfma-read"), wait("exec-write-mfma"))


# ---- the static scan -------------------------------------------------------------------------

# v7, v[4:7], a[0:3], s[4:5]; not the letters inside vcc, src0_sel, sext(...), offset:...
_REG_RE = re.compile(r"(?<![\w.])([vas])(?:\[(\d+):(\d+)\]|(\d+)\b)")
_EXEC_RE = re.compile(r"^exec(_lo|_hi)?$")
_BRANCHES = ("s_cbranch", "s_branch", "s_setpc", "s_endpgm")


def regs(text: str) -> frozenset[tuple[str, int]]:
    """Every register an operand text names, ranges expanded: {('v', 4), ('v', 5), ...}."""
    out: set[tuple[str, int]] = set()
    for m in _REG_RE.finditer(text):
        lo, hi = (int(m.group(2)), int(m.group(3))) if m.group(2) else (int(m.group(4)), int(m.group(4)))
        out.update((m.group(1), r) for r in range(lo, hi + 1))
    return frozenset(out)


@dataclass(frozen=True)
class Inst:
    """What the scan needs of one decoded instruction (regress.emu.codeobject.Instr)."""

    text: str
    mnemonic: str
    ops: tuple[str, ...]
    addr: int  # entry-relative byte offset
    target: int | None  # a branch's entry-relative target

    @classmethod
    def of(cls, ins: Instr) -> Inst:
        return cls(ins.text, ins.mnemonic, tuple(ins.operands), ins.addr, ins.branch_target)

    @property
    def wait_states(self) -> int:
        return int(self.ops[0], 0) + 1 if self.mnemonic == "s_nop" else 1

    @property
    def is_mfma(self) -> bool:
        return self.mnemonic.startswith("v_mfma")

    @property
    def is_valu(self) -> bool:
        return self.mnemonic.startswith("v_") and not self.is_mfma

    @property
    def is_branch(self) -> bool:
        return self.mnemonic.startswith(_BRANCHES)

    @property
    def writes_exec(self) -> bool:
        dst = self.ops[0] if self.ops else ""
        return self.is_valu and (self.mnemonic.startswith("v_cmpx") or bool(_EXEC_RE.match(dst)))


@dataclass(frozen=True)
class Finding:
    rule: str
    mfma: str  # the MFMA the window belongs to
    other: str  # the instruction that breaks it
    wait_states: int  # how many there were

    def __str__(self) -> str:
        need = wait(self.rule, passes_of(self.mfma.split()[0])) if self.rule in RULES else "?"
        return f"[{self.rule}] {self.mfma[:70]} / {self.other[:70]}: {self.wait_states} of {need} wait states"


def scan(instructions: Iterable[Instr]) -> list[Finding]:
    """Every broken MFMA window in one kernel's instructions (a Kernel's `instructions` from
    regress.emu.codeobject), on every path through its branches (see the module docstring)."""
    insts = [Inst.of(i) for i in instructions]
    cfg = _Cfg(insts)
    found: list[Finding] = []
    for i, m in enumerate(insts):
        if m.is_mfma:
            found += _after(insts, cfg, i)
            found += _before(insts, cfg, i)
    return sorted(set(found), key=lambda f: (f.mfma, f.rule, f.other, f.wait_states))


class _Cfg:
    """Successors and predecessors of each instruction: the fall-through, and a branch's target."""

    def __init__(self, insts: list[Inst]) -> None:
        at = {ins.addr: k for k, ins in enumerate(insts)}
        self.unknown: set[int] = set()  # jumps the scan cannot follow (s_setpc, a target outside)
        self.succ: list[list[int]] = []
        for k, ins in enumerate(insts):
            nxt = [k + 1] if k + 1 < len(insts) else []
            if ins.mnemonic == "s_endpgm":
                nxt = []
            elif ins.mnemonic.startswith("s_setpc"):
                nxt = []
                self.unknown.add(k)
            elif ins.is_branch:
                hit = at.get(ins.target) if ins.target is not None else None
                if hit is None:
                    self.unknown.add(k)
                taken = [hit] if hit is not None else []
                nxt = taken if ins.mnemonic == "s_branch" else nxt + taken
            self.succ.append(nxt)
        self.pred: list[list[int]] = [[] for _ in insts]
        for k, nxt in enumerate(self.succ):
            for n in nxt:
                self.pred[n].append(k)


def _after(insts: list[Inst], cfg: _Cfg, i: int) -> list[Finding]:
    """Forward from MFMA i along every path until its longest rule's wait states have issued."""
    m = insts[i]
    dst, c = regs(m.ops[0]), regs(m.ops[3])
    p = passes_of(m.mnemonic)
    need = {
        name: wait(name, p)
        for name in ("mfma-result-read", "mfma-result-srcab", "mfma-srcc-overlap", "mfma-srcc-war")
    }
    horizon = max(need.values())
    out: list[Finding] = []
    seen: set[tuple[int, int]] = set()
    todo = [(n, 0) for n in cfg.succ[i]]
    while todo:
        k, ws = todo.pop()
        if ws >= horizon or (k, ws) in seen:
            continue
        seen.add((k, ws))
        n = insts[k]
        if k in cfg.unknown:
            out.append(Finding(BRANCH_RULE, m.text, n.text, ws))
        if n.is_mfma:
            if dst & regs(" ".join(n.ops[1:3])) and ws < need["mfma-result-srcab"]:
                out.append(Finding("mfma-result-srcab", m.text, n.text, ws))
            n_c = regs(n.ops[3])
            if dst & n_c and n_c != dst and ws < need["mfma-srcc-overlap"]:
                out.append(Finding("mfma-srcc-overlap", m.text, n.text, ws))
        else:
            if dst & regs(" ".join(n.ops)) and ws < need["mfma-result-read"]:
                out.append(Finding("mfma-result-read", m.text, n.text, ws))
            if n.is_valu and n.ops and c & regs(n.ops[0]) and ws < need["mfma-srcc-war"]:
                out.append(Finding("mfma-srcc-war", m.text, n.text, ws))
        todo += [(s, ws + n.wait_states) for s in cfg.succ[k]]
    return out


def _before(insts: list[Inst], cfg: _Cfg, i: int) -> list[Finding]:
    """Backward from MFMA i along every path into it until BEFORE_WS wait states."""
    m = insts[i]
    reads = regs(" ".join(m.ops[1:4]))
    out: list[Finding] = []
    seen: set[tuple[int, int]] = set()
    todo = [(p, 0) for p in cfg.pred[i]]
    while todo:
        k, ws = todo.pop()
        if ws >= BEFORE_WS or (k, ws) in seen:
            continue
        seen.add((k, ws))
        p = insts[k]
        if p.writes_exec and ws < wait("exec-write-mfma"):
            out.append(Finding("exec-write-mfma", m.text, p.text, ws))
        if p.is_valu and p.ops and regs(p.ops[0]) & reads and ws < wait("valu-write-mfma-read"):
            out.append(Finding("valu-write-mfma-read", m.text, p.text, ws))
        todo += [(q, ws + p.wait_states) for q in cfg.pred[k]]
    return out
