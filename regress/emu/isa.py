"""Operand decoding and instruction semantics of the gfx942 subset the attention kernels use.

`compile_instruction` turns one decoded `Instr` into a closure over a `Wave` plus the static facts
the hazard checker and the cost trace need (`Meta`). The closure comes from the instruction's
family: a table maps each mnemonic (exactly, or by a pattern for the sized forms) to one compiler
(`family`); adding an instruction is adding a family or a row to a family's table. Semantics follow
AMD's CDNA3 ISA reference; the floating-point cores live in regress.emu.fp. An instruction outside
the subset is refused when the kernel is loaded (UnsupportedInstruction), never skipped."""

from __future__ import annotations

import contextvars
import functools
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from regress.emu import fp
from regress.emu.codeobject import Instr


class Wave(Protocol):
    """What an instruction's closure may read and change of its wave (machine.Wave is the one
    implementation). Declared here so the instruction table needs nothing from the machine that
    runs it: the machine imports isa, never the other way round."""

    v: np.ndarray  # (256, 64) uint32 VGPRs
    vf: np.ndarray  # the same registers viewed as float32
    s: list[int]  # SGPRs
    scc: int
    exec: int
    mask: np.ndarray  # EXEC as 64 booleans
    full: bool  # every lane on
    prio: int  # s_setprio

    def sset(self, d: int, val: int) -> None: ...
    def sset64(self, d: int, val: int) -> None: ...
    def vset(self, d: int, val: Any) -> None: ...
    def vset64(self, d: int, val: np.ndarray) -> None: ...
    def vsetf(self, d: int, val: Any) -> None: ...
    def lanes(self, sreg: int) -> np.ndarray: ...
    def set_mask_reg(self, d: int, lanes: np.ndarray) -> None: ...
    def getpc(self, offset: int) -> int: ...
    def carry(self, x: int) -> int: ...
    def borrow(self, x: int) -> int: ...
    def overflow(self, x: int) -> int: ...
    def nz(self, x: int) -> int: ...
    def global_load(self, addr: Any, offset: int, d: int, ndw: int) -> None: ...
    def global_store(self, addr: Any, offset: int, src: int, ndw: int, nbytes: int = 0) -> None: ...
    def buffer_load(self, rsrc: list[int], soff: int, voff: Any, inst_off: int, d: int, ndw: int) -> None: ...
    def buffer_store(
        self, rsrc: list[int], soff: int, voff: Any, inst_off: int, src: int, ndw: int
    ) -> None: ...
    def buffer_load_lds(self, rsrc: list[int], soff: int, voff: Any, inst_off: int) -> None: ...
    def scratch(self, addr: Any, d: int, ndw: int, store: bool) -> None: ...
    def smem_load(self, d: int, addr: int, ndw: int) -> None: ...
    def lds_read(self, addr: Any, offset: int, d: int, ndw: int) -> None: ...
    def lds_read2(self, addr: Any, offsets: tuple[int, int], d: int, ndw: int) -> None: ...
    def lds_write(self, addr: Any, offset: int, src: int, ndw: int) -> None: ...
    def ds_swizzle(self, d: int, src: Any, src_lane: np.ndarray) -> None: ...
    def ds_bpermute(self, d: int, addr: Any, src: Any, offset: int) -> None: ...
    def ds_permute(self, d: int, addr: Any, src: Any, offset: int) -> None: ...
    def waitcnt(self, vm: int, lgkm: int) -> None: ...


M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
VCC, M0, EXEC = 106, 124, 126
SPECIAL = {
    "vcc": (VCC, 2),
    "vcc_lo": (VCC, 1),
    "vcc_hi": (VCC + 1, 1),
    "exec": (EXEC, 2),
    "exec_lo": (EXEC, 1),
    "exec_hi": (EXEC + 1, 1),
    "m0": (M0, 1),
}


class UnsupportedInstruction(RuntimeError):
    """The kernel uses an instruction or operand form the emulator does not implement."""


# The fp32 denormal mode of the kernel being compiled (descriptor FLOAT_DENORM_MODE_32 = 0: VALU
# sources and results that are denormal read and write as zero of the same sign). Set by
# compile_instruction for the duration of one compile.
_FTZ: contextvars.ContextVar[bool] = contextvars.ContextVar("ftz", default=False)


@dataclass
class Operand:
    kind: str  # "v", "s", "imm", "off"
    index: int = 0  # first register
    count: int = 1
    value: int = 0  # immediate bit pattern (64-bit sign-extended for ints)
    neg: bool = False
    abs: bool = False
    is_float_imm: bool = False


_REG = re.compile(r"^([vs])(?:(\d+)|\[(\d+):(\d+)\])$")


def parse_operand(text: str) -> Operand:
    t = text.strip()
    neg = ab = False
    if (t.startswith("-") and not re.match(r"^-\d", t)) or t.startswith("-|"):
        neg, t = True, t[1:]
    if t.startswith("|") and t.endswith("|"):
        ab, t = True, t[1:-1]
    if t == "off":
        return Operand("off")
    if t in SPECIAL:
        i, n = SPECIAL[t]
        return Operand("s", i, n, neg=neg, abs=ab)
    if m := _REG.match(t):
        lo = int(m.group(2) if m.group(2) is not None else m.group(3))
        hi = int(m.group(2) if m.group(2) is not None else m.group(4))
        return Operand(m.group(1), lo, hi - lo + 1, neg=neg, abs=ab)
    if re.match(r"^-?0x[0-9a-fA-F]+$", t) or re.match(r"^-?\d+$", t):
        v = int(t, 0)
        return Operand("imm", value=v & M64, neg=neg, abs=ab)
    if re.match(r"^-?\d+\.\d+(e[-+]?\d+)?$", t):
        bits = struct.unpack("<I", struct.pack("<f", float(t)))[0]
        return Operand("imm", value=bits, neg=neg, abs=ab, is_float_imm=True)
    raise UnsupportedInstruction(f"operand {text!r}")


# --- static facts per instruction -------------------------------------------------------------------

# Bare flags a memory instruction may carry: addressing (offen, lds) and cache policy (sc0, sc1, nt),
# which changes no result the emulator models.
MEMORY_FLAGS = frozenset({"offen", "lds", "sc0", "sc1", "nt"})

CLASSES = ("mfma", "valu", "lds", "global", "smem", "salu", "branch", "nop", "waitcnt", "barrier")


@dataclass
class Meta:
    cls: str
    vreads: tuple[int, ...] = ()
    vwrites: tuple[int, ...] = ()
    sreads: tuple[int, ...] = ()
    swrites: tuple[int, ...] = ()
    wait_states: int = 1
    mfma_ab: tuple[int, ...] = ()
    mfma_c: tuple[int, ...] = ()
    mfma_passes: int = 0
    target: int | None = None  # branch target, instruction index


def classify(mnemonic: str) -> str:
    if mnemonic.startswith("v_mfma"):
        return "mfma"
    if mnemonic.startswith("v_"):
        return "valu"
    if mnemonic.startswith("ds_"):
        return "lds"
    if mnemonic.startswith(("global_", "buffer_", "scratch_")):
        return "global"
    if mnemonic.startswith("s_load"):
        return "smem"
    if mnemonic in ("s_nop", "v_nop"):
        return "nop"
    if mnemonic == "s_waitcnt":
        return "waitcnt"
    if mnemonic == "s_barrier":
        return "barrier"
    if mnemonic.startswith("s_cbranch") or mnemonic in ("s_branch", "s_endpgm"):
        return "branch"
    return "salu"


def _regs(op: Operand, kind: str) -> tuple[int, ...]:
    return tuple(range(op.index, op.index + op.count)) if op.kind == kind else ()


# --- operand access ---------------------------------------------------------------------------------

Reader = Callable[["Wave"], Any]


def _imm32(op: Operand) -> int:
    return op.value & M32


def reader_u32(op: Operand) -> Reader:
    if op.kind == "v":
        i = op.index
        return lambda w: w.v[i]
    if op.kind == "s":
        i = op.index
        return lambda w: w.s[i]
    if op.kind == "imm":
        c = _imm32(op)
        return lambda w: c
    raise UnsupportedInstruction(f"operand kind {op.kind} as a 32-bit source")


def reader_u64(op: Operand) -> Reader:
    """64-bit source: a [64] uint64 array (VGPR pair) or an int (SGPR pair, inline constant)."""
    if op.kind == "v":
        i = op.index
        return lambda w: w.v[i].astype(np.uint64) | (w.v[i + 1].astype(np.uint64) << np.uint64(32))
    if op.kind == "s":
        i = op.index
        return lambda w: w.s[i] | (w.s[i + 1] << 32)
    if op.kind == "imm":
        c = op.value & M64 if not op.is_float_imm else op.value
        return lambda w: c
    raise UnsupportedInstruction(f"operand kind {op.kind} as a 64-bit source")


def reader_f32(op: Operand) -> Reader:
    if op.kind == "v":
        i = op.index
        base: Reader = lambda w: w.vf[i]  # noqa: E731
    elif op.kind == "s":
        i = op.index
        base = lambda w: np.uint32(w.s[i]).view(np.float32)  # noqa: E731
    elif op.kind == "imm":
        c = np.uint32(_imm32(op)).view(np.float32)
        base = lambda w: c  # noqa: E731
    else:
        raise UnsupportedInstruction(f"operand kind {op.kind} as a float source")
    if op.abs:
        inner = base
        base = lambda w: np.abs(inner(w))  # noqa: E731
    if op.neg:
        inner2 = base
        base = lambda w: -inner2(w)  # noqa: E731
    if _FTZ.get():
        inner3 = base
        base = lambda w: fp.flush_denorm(inner3(w))  # noqa: E731
    return base


def _full(x: Any, dtype: Any) -> np.ndarray:
    """x as a [64] array of dtype (a lane vector is passed through, a scalar is broadcast)."""
    if type(x) is np.ndarray and x.dtype == dtype and x.shape == (64,):
        return x
    if isinstance(x, np.ndarray) and x.shape == (64,):
        return x.astype(dtype)
    return np.full(64, x, dtype=dtype)


# --- compilation -------------------------------------------------------------------------------------

Exec = Callable[["Wave"], int | None]


def _waitcnt(ops: list[str]) -> tuple[int, int]:
    vm, lgkm = 63, 15
    for o in ops:
        if m := re.match(r"vmcnt\((\d+)\)", o):
            vm = int(m.group(1))
        elif m := re.match(r"lgkmcnt\((\d+)\)", o):
            lgkm = int(m.group(1))
        elif not re.match(r"expcnt\(\d+\)", o):
            raise UnsupportedInstruction(f"s_waitcnt operand {o!r}")
    return vm, lgkm


_U32_BIN: dict[str, Callable[[Any, Any], Any]] = {
    "v_and_b32": lambda a, b: a & b,
    "v_or_b32": lambda a, b: a | b,
    "v_xor_b32": lambda a, b: a ^ b,
    "v_add_u32": lambda a, b: (np.asarray(a, np.uint64) + b) & M32,
    "v_sub_u32": lambda a, b: (np.asarray(a, np.uint64) - np.asarray(b, np.uint64)) & M32,
    "v_lshlrev_b32": lambda a, b: (np.asarray(b, np.uint64) << (np.asarray(a, np.uint64) & 31)) & M32,
    "v_lshrrev_b32": lambda a, b: np.asarray(b, np.uint32) >> (np.asarray(a, np.uint32) & 31),
}
_F32_BIN: dict[str, Callable[[Any, Any], Any]] = {
    "v_mul_f32": lambda a, b: np.multiply(a, b, dtype=np.float32),
    "v_add_f32": lambda a, b: np.add(a, b, dtype=np.float32),
    "v_sub_f32": lambda a, b: np.subtract(a, b, dtype=np.float32),
    # IEEE mode maxNum: a quiet NaN operand loses to a number.
    "v_max_f32": lambda a, b: np.fmax(a, b, dtype=np.float32),
}
_VCMP: dict[str, Callable[[Any, Any], Any]] = {
    "v_cmp_gt_u32": lambda a, b: np.asarray(a, np.uint32) > np.asarray(b, np.uint32),
    "v_cmp_lt_u32": lambda a, b: np.asarray(a, np.uint32) < np.asarray(b, np.uint32),
    "v_cmp_eq_u32": lambda a, b: np.asarray(a, np.uint32) == np.asarray(b, np.uint32),
    "v_cmp_ne_u32": lambda a, b: np.asarray(a, np.uint32) != np.asarray(b, np.uint32),
    "v_cmp_ge_u32": lambda a, b: np.asarray(a, np.uint32) >= np.asarray(b, np.uint32),
    "v_cmp_le_u32": lambda a, b: np.asarray(a, np.uint32) <= np.asarray(b, np.uint32),
}


def _compare(relation: np.ufunc, operand: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    """A v_cmp: `relation` of both sources, each read as `operand` reads it."""
    return lambda a, b: relation(operand(a), operand(b))


_RELATIONS: dict[str, np.ufunc] = {
    "gt": np.greater,
    "lt": np.less,
    "eq": np.equal,
    "ne": np.not_equal,
    "ge": np.greater_equal,
    "le": np.less_equal,
}
for _rel in ("eq", "ne"):  # VGPR pairs or SGPR pairs, all 64 bits
    _VCMP[f"v_cmp_{_rel}_u64"] = _compare(_RELATIONS[_rel], lambda x: np.asarray(x, np.uint64))
for _rel in ("gt", "lt", "eq", "ne"):
    _VCMP[f"v_cmp_{_rel}_u16"] = _compare(_RELATIONS[_rel], lambda x: np.asarray(x, np.uint32) & 0xFFFF)
_PK_F32: dict[str, tuple[Callable[..., Any], int]] = {
    "v_pk_mul_f32": (lambda a, b: np.multiply(a, b, dtype=np.float32), 2),
    "v_pk_add_f32": (lambda a, b: np.add(a, b, dtype=np.float32), 2),
    "v_pk_fma_f32": (
        lambda a, b, c: fp.fma_f32(_full(a, np.float32), _full(b, np.float32), _full(c, np.float32)),
        3,
    ),
}


def _i32(x: Any) -> np.ndarray | np.int32:
    return np.asarray(x, np.uint32).view(np.int32) if isinstance(x, np.ndarray) else np.int32(_s32(int(x)))


def _u24(x: Any) -> np.ndarray:
    return np.asarray(x, np.uint64) & np.uint64(0xFFFFFF)


_U32_BIN.update(
    {
        "v_subrev_u32": lambda a, b: (np.asarray(b, np.uint64) - np.asarray(a, np.uint64)) & M32,
        "v_ashrrev_i32": lambda a, b: (
            _full(b, np.uint32).view(np.int32) >> (_full(a, np.uint32) & 31).astype(np.int32)
        ).view(np.uint32),
        "v_mul_u32_u24": lambda a, b: (_u24(a) * _u24(b)) & M32,
        "v_max_u32": lambda a, b: np.maximum(np.asarray(a, np.uint32), np.asarray(b, np.uint32)),
        "v_min_u32": lambda a, b: np.minimum(np.asarray(a, np.uint32), np.asarray(b, np.uint32)),
        "v_max_i32": lambda a, b: np.maximum(_i32(a), _i32(b)).astype(np.int32).view(np.uint32),
        "v_min_i32": lambda a, b: np.minimum(_i32(a), _i32(b)).astype(np.int32).view(np.uint32),
        "v_mul_hi_u32": lambda a, b: (np.asarray(a, np.uint64) * np.asarray(b, np.uint64)) >> np.uint64(32),
    }
)
for _rel, _relation in _RELATIONS.items():
    _VCMP[f"v_cmp_{_rel}_i32"] = _compare(_relation, _i32)
_U32_BIN["v_mul_lo_u32"] = lambda a, b: (np.asarray(a, np.uint64) * np.asarray(b, np.uint64)) & M32
# Carry ops: (adds, operands reversed, takes a carry in); the carry/borrow out goes to a lane mask.
_CARRY_OPS = {
    "v_add_co_u32": (True, False, False),
    "v_addc_co_u32": (True, False, True),
    "v_sub_co_u32": (False, False, False),
    "v_subrev_co_u32": (False, True, False),
    "v_subb_co_u32": (False, False, True),
    "v_subbrev_co_u32": (False, True, True),
}

# VOP3 v_sub_i32 / v_add_i32 (no carry out, no clamp here) wrap like the unsigned forms (AITER's
# causal objects use v_add_i32).
_U32_BIN["v_sub_i32"] = _U32_BIN["v_sub_u32"]
_U32_BIN["v_add_i32"] = _U32_BIN["v_add_u32"]


def _i24(x: Any) -> np.ndarray:
    """The low 24 bits of a 32-bit operand, sign-extended (v_mul_i32_i24)."""
    v = np.asarray(x, np.int64) & 0xFFFFFF
    return np.where(v & 0x800000, v - (1 << 24), v)


_U32_BIN["v_mul_i32_i24"] = lambda a, b: (_i24(a) * _i24(b)) & M32
# 16-bit VOP2 integer ops: the sources' low halves; gfx9 zeroes the result's high half (LLVM's
# GCNSubtarget::zeroesHigh16BitsOfDest lists V_ADD_U16 and V_MIN_U16 for GFX9 and earlier).
_U32_BIN["v_add_u16"] = lambda a, b: (np.asarray(a, np.uint32) + np.asarray(b, np.uint32)) & 0xFFFF
_U32_BIN["v_min_u16"] = lambda a, b: np.minimum(
    np.asarray(a, np.uint32) & 0xFFFF, np.asarray(b, np.uint32) & 0xFFFF
)
_PK_U16: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "v_pk_add_u16": lambda x, y: (x + y) & 0xFFFF,
    "v_pk_min_u16": np.minimum,
}
_SDWA_SEL = {
    "BYTE_0": (0, 0xFF),
    "BYTE_1": (8, 0xFF),
    "BYTE_2": (16, 0xFF),
    "BYTE_3": (24, 0xFF),
    "WORD_0": (0, 0xFFFF),
    "WORD_1": (16, 0xFFFF),
    "DWORD": (0, M32),
}


def _sdwa_reader(op: Operand, sel: str) -> Reader:
    """An SDWA source: the selected byte or word of the operand, zero-extended."""
    inner = reader_u32(op)
    shift, mask = _SDWA_SEL[sel]
    if sel == "DWORD":
        return inner
    return lambda w: (np.asarray(inner(w), np.uint32) >> np.uint32(shift)) & np.uint32(mask)


_VCMP_F: dict[str, Callable[[Any, Any], Any]] = {
    "v_cmp_neq_f32": lambda a, b: ~(np.asarray(a) == np.asarray(b)),  # unordered or not equal
    "v_cmp_lt_f32": lambda a, b: np.asarray(a) < np.asarray(b),
    "v_cmp_gt_f32": lambda a, b: np.asarray(a) > np.asarray(b),
    "v_cmp_eq_f32": lambda a, b: np.asarray(a) == np.asarray(b),
    "v_cmp_u_f32": lambda a, b: np.isnan(a) | np.isnan(b),
    "v_cmp_o_f32": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
    "v_cmp_nlt_f32": lambda a, b: ~(np.asarray(a) < np.asarray(b)),
    "v_cmp_ge_f32": lambda a, b: np.asarray(a) >= np.asarray(b),
    "v_cmp_le_f32": lambda a, b: np.asarray(a) <= np.asarray(b),
}


# Passes of each modelled MFMA (LLVM's gfx942 scheduling model, the RThroughput llvm-mca-19 reports:
# 4 for 16x16x16 bf16, 8 for 32x32x8 bf16); the hazard wait states follow from it (machine.py).
MFMA_PASSES = {"v_mfma_f32_16x16x16_bf16": 4, "v_mfma_f32_32x32x8_bf16": 8}


def _s32(x: int) -> int:
    return x - (1 << 32) if x & 0x80000000 else x


def compile_instruction(ins: Instr, index_of: dict[int, int], *, ftz: bool = False) -> tuple[Exec, Meta]:
    """(closure, static facts). `index_of` maps entry-relative addresses to instruction indices;
    `ftz`: the kernel runs with fp32 denormals flushed (descriptor FLOAT_DENORM_MODE_32 = 0)."""
    token = _FTZ.set(ftz)
    try:
        return _compile_instruction(ins, index_of)
    finally:
        _FTZ.reset(token)


def _compile_instruction(ins: Instr, index_of: dict[int, int]) -> tuple[Exec, Meta]:
    name = re.sub(r"_e(32|64)$", "", ins.mnemonic)
    # Branch targets come from the encoding (the listing may name them by label).
    branch = name.startswith("s_cbranch") or name == "s_branch"
    ops = [parse_operand(o) for o in ins.operands] if name != "s_waitcnt" and not branch else []
    cls = classify(name)
    meta = Meta(cls)
    flags = {f for f, v in ins.modifiers.items() if v == ""}
    if flags - (MEMORY_FLAGS if cls == "global" else set()):
        raise UnsupportedInstruction(f"{ins.text}: flag(s) {', '.join(sorted(flags))} not modelled")
    for k, op in enumerate(ops):
        is_dst = k == 0 and not (
            name.startswith("ds_write")
            or name.startswith(("global_store", "buffer_store", "scratch_store"))
            or (name.startswith("buffer_load") and "lds" in flags)
            or name.startswith("s_cmp")
            or name.startswith("s_bitcmp")
            or name.startswith("s_setprio")
        )
        if name.startswith("v_cmp") and k == 0:
            is_dst = True
        if name in ("v_div_scale_f32", "v_mad_u64_u32") and k == 1:
            meta.swrites += _regs(op, "s")
            continue
        if is_dst:
            meta.vwrites += _regs(op, "v")
            meta.swrites += _regs(op, "s")
        else:
            meta.vreads += _regs(op, "v")
            meta.sreads += _regs(op, "s")
    if name in ("v_fmac_f32",):
        meta.vreads += meta.vwrites
    compiler = family_of(name)
    if compiler is None:
        raise UnsupportedInstruction(ins.text)
    return compiler(Site(name, ins, ops, meta, index_of)), meta


_LANE = np.arange(64, dtype=np.uint64)
_MASK_BELOW = (np.uint64(1) << _LANE) - np.uint64(1)  # lane l: bits 0 .. l-1
_BELOW_LO = (_MASK_BELOW & np.uint64(M32)).astype(np.uint32)[:, None]
_BELOW_HI = (_MASK_BELOW >> np.uint64(32)).astype(np.uint32)[:, None]


def swizzle_lanes(offset: str) -> np.ndarray:
    """ds_swizzle_b32's source lane for each lane, from the 16-bit offset (CDNA3 ISA, DS_SWIZZLE_B32)
    or the assembler's swizzle(...) macro. offset[15] = 1: quad permute, lane 4q + i reads
    4q + offset[2i+1:2i]; else bit-mask mode within each 32 lanes: and = offset[4:0], or = offset[9:5],
    xor = offset[14:10], source = ((lane & and) | or) ^ xor."""
    lane = np.arange(64)
    if m := re.fullmatch(r"swizzle\((\w+)((?:,\d+)*)\)", offset):
        kind, args = m.group(1), [int(x) for x in m.group(2).split(",")[1:]]
        if kind == "QUAD_PERM" and len(args) == 4:
            quad: np.ndarray = (lane & ~3) | np.asarray(args)[lane & 3]
            return quad
        masks: dict[str, Callable[..., tuple[int, int, int]]] = {
            "SWAP": lambda n: (0x1F, 0, n),
            "REVERSE": lambda n: (0x1F, 0, n - 1),
            "BROADCAST": lambda size, at: (0x1F & ~(size - 1), at, 0),
        }
        if kind not in masks:
            raise UnsupportedInstruction(f"ds_swizzle offset {offset}")
        and_m, or_m, xor_m = masks[kind](*args)
    else:
        try:
            v = int(offset, 0)
        except ValueError:
            raise UnsupportedInstruction(f"ds_swizzle offset {offset}") from None
        if v & 0x8000:
            return (lane & ~3) | ((v >> (2 * (lane & 3))) & 3)
        and_m, or_m, xor_m = v & 0x1F, (v >> 5) & 0x1F, (v >> 10) & 0x1F
    source: np.ndarray = (lane & 0x20) | (((lane & and_m) | or_m) ^ xor_m)
    return source


# --- the instruction families ---------------------------------------------------------------------
#
# Each family compiles the instructions of one shape of semantics (a table of binary ops, a memory
# access, a branch) from a `Site`. `family` registers it under its exact mnemonics, or under a
# pattern for the families whose mnemonics encode a size (`global_load_dwordx4`); a mnemonic matches
# at most one family (tests/emu/test_isa.py), so the order of the table decides nothing. A mnemonic
# that matches none is refused when the kernel is loaded.


@dataclass
class Site:
    """One instruction being compiled: its mnemonic without the encoding suffix, the decoded operands
    and the static facts a family may add to (`meta`), plus the reader shorthands every family uses."""

    name: str
    ins: Instr
    ops: list[Operand]
    meta: Meta
    index_of: dict[int, int]  # entry-relative address -> instruction index (branch targets)

    @property
    def d(self) -> int:
        """The first operand's register: the destination, or a store's address."""
        return self.ops[0].index

    def u32(self, k: int) -> Reader:
        return reader_u32(self.ops[k])

    def u64(self, k: int) -> Reader:
        return reader_u64(self.ops[k])

    def f32(self, k: int) -> Reader:
        return reader_f32(self.ops[k])

    def offset(self, key: str = "offset") -> int:
        return int(self.ins.modifiers.get(key, "0"), 0)

    def sel(self, key: str, n: int, default: str) -> list[int]:
        """A per-source modifier list (op_sel, neg_lo, ...), `default` for each of `n` sources if absent."""
        text = self.ins.modifiers.get(key, "[" + ",".join(default * n) + "]")
        return [int(x) for x in text.strip("[]").split(",")]


Compiler = Callable[[Site], Exec]
_BY_NAME: dict[str, Compiler] = {}
_BY_PATTERN: list[tuple[re.Pattern[str], Compiler]] = []


def family(*names: str, pattern: str | None = None) -> Callable[[Compiler], Compiler]:
    """Registers a family compiler for exact mnemonics and/or a full-match pattern."""

    def register(fn: Compiler) -> Compiler:
        for n in names:
            if n in _BY_NAME:
                raise ValueError(f"{n} is in two instruction families")
            _BY_NAME[n] = fn
        if pattern is not None:
            _BY_PATTERN.append((re.compile(pattern), fn))
        return fn

    return register


def family_of(name: str) -> Compiler | None:
    """The family that compiles mnemonic `name` (without _e32/_e64), None when none does."""
    fn = _BY_NAME.get(name)
    if fn is not None:
        return fn
    return next((fn for p, fn in _BY_PATTERN if p.fullmatch(name)), None)


# ---- vector ALU: tables of element-wise ops ----


@family(*_U32_BIN)
def _valu_u32_bin(s: Site) -> Exec:
    f, d, a, b = _U32_BIN[s.name], s.d, s.u32(1), s.u32(2)

    def run(w: Wave) -> None:
        w.vset(d, np.asarray(f(a(w), b(w)), dtype=np.uint32))

    return run


@family(*_F32_BIN)
def _valu_f32_bin(s: Site) -> Exec:
    f, d, af, bf = _F32_BIN[s.name], s.d, s.f32(1), s.f32(2)

    def run(w: Wave) -> None:
        w.vsetf(d, f(af(w), bf(w)))

    return run


@family(*_VCMP, *_VCMP_F)
def _valu_compare(s: Site) -> Exec:
    name = s.name
    cmp = _VCMP.get(name) or _VCMP_F[name]
    rd = reader_f32 if name in _VCMP_F else reader_u64 if name.endswith("_u64") else reader_u32
    a, b = rd(s.ops[1]), rd(s.ops[2])
    dst = s.d

    def run(w: Wave) -> None:
        lanes = np.broadcast_to(cmp(a(w), b(w)), (64,)) & w.mask
        w.set_mask_reg(dst, lanes)

    return run


@family(pattern=r".+_sdwa")
def _valu_sdwa(s: Site) -> Exec:
    """SDWA forms (sub-dword selects on the sources, whole-dword destination only)."""
    name, mods, ops = s.name.removesuffix("_sdwa"), s.ins.modifiers, s.ops
    if mods.get("dst_sel", "DWORD") != "DWORD" or mods.get("dst_unused", "UNUSED_PAD") != "UNUSED_PAD":
        raise UnsupportedInstruction(s.ins.text)
    a = _sdwa_reader(ops[1], mods.get("src0_sel", "DWORD"))
    b = _sdwa_reader(ops[2], mods.get("src1_sel", "DWORD"))
    if name in _VCMP:
        cmp, dst = _VCMP[name], ops[0].index

        def run_cmp(w: Wave) -> None:
            w.set_mask_reg(dst, np.broadcast_to(cmp(a(w), b(w)), (64,)) & w.mask)

        return run_cmp
    if name in _U32_BIN:
        f, d = _U32_BIN[name], ops[0].index
        return lambda w: w.vset(d, _full(np.asarray(f(a(w), b(w))), np.uint32))
    raise UnsupportedInstruction(s.ins.text)


@family(*_PK_U16)
def _valu_pk_u16(s: Site) -> Exec:
    """Packed 16-bit integer ops: lo half from op_sel, hi half from op_sel_hi (default [0,0] / [1,1])."""
    if any(k in s.ins.modifiers for k in ("neg_lo", "neg_hi", "clamp")):
        raise UnsupportedInstruction(s.ins.text)
    hi_sel = [int(x) for x in s.ins.modifiers.get("op_sel_hi", "[1,1]").strip("[]").split(",")]
    lo_sel = [int(x) for x in s.ins.modifiers.get("op_sel", "[0,0]").strip("[]").split(",")]
    f, d, a, b = _PK_U16[s.name], s.d, s.u32(1), s.u32(2)

    def half(x: Any, sel: int) -> np.ndarray:
        return (np.asarray(x, np.uint32) >> np.uint32(16 * sel)) & np.uint32(0xFFFF)

    def run(w: Wave) -> None:
        x, y = a(w), b(w)
        lo = f(half(x, lo_sel[0]), half(y, lo_sel[1])) & 0xFFFF
        hi = f(half(x, hi_sel[0]), half(y, hi_sel[1])) & 0xFFFF
        w.vset(d, _full(np.asarray(lo | (hi << np.uint32(16)), np.uint32), np.uint32))

    return run


@family(*_PK_F32)
def _valu_pk_f32(s: Site) -> Exec:
    """Packed fp32: the low result from each source's op_sel register of the pair, the high one from
    its op_sel_hi register (defaults [0,..] and [1,..]); neg_lo / neg_hi negate, per source, the
    operand feeding the low / the high result."""
    f, n = _PK_F32[s.name]
    d, srcs = s.d, s.ops[1 : 1 + n]
    hi_sel, lo_sel = s.sel("op_sel_hi", n, "1"), s.sel("op_sel", n, "0")
    if "clamp" in s.ins.modifiers or any(o.neg or o.abs for o in srcs):
        raise UnsupportedInstruction(s.ins.text)
    neg_lo, neg_hi = s.sel("neg_lo", n, "0"), s.sel("neg_hi", n, "0")

    def half(op: Operand, sel: int, neg: int) -> Reader:
        r = reader_f32(Operand(op.kind, op.index + sel, 1, op.value) if op.kind != "imm" else op)
        return (lambda w: np.negative(np.asarray(r(w), np.float32))) if neg else r

    los = [half(o, lo_sel[k], neg_lo[k]) for k, o in enumerate(srcs)]
    his = [half(o, hi_sel[k], neg_hi[k]) for k, o in enumerate(srcs)]

    def run(w: Wave) -> None:
        lo = f(*(r(w) for r in los))
        hi = f(*(r(w) for r in his))
        w.vsetf(d, lo)
        w.vsetf(d + 1, hi)

    return run


# ---- vector ALU: moves, selects and lane counts ----


@family("v_mov_b32")
def _v_mov_b32(s: Site) -> Exec:
    d, a = s.d, s.u32(1)
    return lambda w: w.vset(d, _full(a(w), np.uint32))


@family("v_not_b32")
def _v_not_b32(s: Site) -> Exec:
    d, a = s.d, s.u32(1)
    return lambda w: w.vset(d, _full(a(w), np.uint32) ^ np.uint32(M32))


@family("v_mov_b64")
def _v_mov_b64(s: Site) -> Exec:
    d, a = s.d, s.u64(1)

    def run(w: Wave) -> None:
        w.vset64(d, _full(a(w), np.uint64))

    return run


@family("v_cndmask_b32")
def _v_cndmask_b32(s: Site) -> Exec:
    d, a, b = s.d, s.u32(1), s.u32(2)
    sel = s.ops[3].index if len(s.ops) > 3 else VCC

    def run(w: Wave) -> None:
        w.vset(d, np.where(w.lanes(sel), _full(b(w), np.uint32), _full(a(w), np.uint32)).astype(np.uint32))

    return run


@family("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32")
def _v_mbcnt(s: Site) -> Exec:
    """The popcount of the mask bits below this lane, in the low or the high half of the 64 lanes."""
    d, a, b = s.d, s.u32(1), s.u32(2)
    below = _BELOW_LO if s.name.endswith("lo_u32_b32") else _BELOW_HI

    def run(w: Wave) -> None:
        m = _full(a(w), np.uint32)[:, None] & below
        cnt = np.unpackbits(m.view(np.uint8).reshape(64, 4), axis=1).sum(axis=1)
        w.vset(d, ((cnt.astype(np.uint64) + np.asarray(b(w), np.uint64)) & M32).astype(np.uint32))

    return run


@family("v_nop")
def _v_nop(s: Site) -> Exec:
    return lambda w: None


@family("v_readfirstlane_b32")
def _v_readfirstlane_b32(s: Site) -> Exec:
    d, a = s.d, s.u32(1)

    def run(w: Wave) -> None:
        x = _full(a(w), np.uint32)
        act = np.flatnonzero(w.mask)
        w.sset(d, int(x[act[0] if act.size else 0]))

    return run


# ---- vector ALU: fp32 arithmetic, transcendentals and conversions ----


@family("v_fma_f32", "v_fmac_f32")
def _v_fma_f32(s: Site) -> Exec:
    d = s.d
    a, b = s.f32(1), s.f32(2)
    c = s.f32(3) if s.name == "v_fma_f32" else reader_f32(Operand("v", d))
    return lambda w: w.vsetf(
        d, fp.fma_f32(_full(a(w), np.float32), _full(b(w), np.float32), _full(c(w), np.float32))
    )


@family("v_max3_f32")
def _v_max3_f32(s: Site) -> Exec:
    d, a, b, c = s.d, s.f32(1), s.f32(2), s.f32(3)
    return lambda w: w.vsetf(d, np.fmax(np.fmax(a(w), b(w)), c(w), dtype=np.float32))


@family("v_log_f32", "v_exp_f32", "v_rcp_f32", "v_rcp_iflag_f32")
def _valu_transcendental(s: Site) -> Exec:
    f1 = {"v_log_f32": fp.log2_f32, "v_exp_f32": fp.exp2_f32}.get(s.name, fp.rcp_f32)
    d, a = s.d, s.f32(1)
    return lambda w: w.vsetf(d, f1(_full(a(w), np.float32)))


@family("v_cvt_f32_u32")
def _v_cvt_f32_u32(s: Site) -> Exec:
    d, a = s.d, s.u32(1)
    return lambda w: w.vsetf(d, _full(a(w), np.uint32).astype(np.float32))


@family("v_cvt_u32_f32")
def _v_cvt_u32_f32(s: Site) -> Exec:
    d, af = s.d, s.f32(1)

    def run(w: Wave) -> None:
        x = _full(af(w), np.float32).astype(np.float64)
        x = np.where(np.isnan(x), 0.0, np.clip(np.trunc(x), 0.0, float(M32)))
        w.vset(d, x.astype(np.uint32))

    return run


@family("v_div_scale_f32")
def _v_div_scale_f32(s: Site) -> Exec:
    d, sd = s.d, s.ops[1].index
    a, b, c = s.f32(2), s.f32(3), s.f32(4)

    def run(w: Wave) -> None:
        r, vcc = fp.div_scale_f32(_full(a(w), np.float32), _full(b(w), np.float32), _full(c(w), np.float32))
        w.vsetf(d, r)
        w.set_mask_reg(sd, vcc & w.mask)

    return run


@family("v_div_fmas_f32")
def _v_div_fmas_f32(s: Site) -> Exec:
    d, a, b, c = s.d, s.f32(1), s.f32(2), s.f32(3)
    s.meta.sreads += (VCC, VCC + 1)

    def run(w: Wave) -> None:
        w.vsetf(
            d,
            fp.div_fmas_f32(
                _full(a(w), np.float32), _full(b(w), np.float32), _full(c(w), np.float32), w.lanes(VCC)
            ),
        )

    return run


@family("v_div_fixup_f32")
def _v_div_fixup_f32(s: Site) -> Exec:
    d, a, b, c = s.d, s.f32(1), s.f32(2), s.f32(3)
    return lambda w: w.vsetf(
        d, fp.div_fixup_f32(_full(a(w), np.float32), _full(b(w), np.float32), _full(c(w), np.float32))
    )


# ---- vector ALU: three-source integer ops and 64-bit shifts ----


@family("v_add3_u32")
def _v_add3_u32(s: Site) -> Exec:
    d, a, b, c = s.d, s.u32(1), s.u32(2), s.u32(3)
    return lambda w: w.vset(d, ((np.asarray(a(w), np.uint64) + b(w) + c(w)) & M32).astype(np.uint32))


@family("v_lshl_or_b32")
def _v_lshl_or_b32(s: Site) -> Exec:
    d, a, b, c = s.d, s.u32(1), s.u32(2), s.u32(3)
    return lambda w: w.vset(
        d,
        (((np.asarray(a(w), np.uint64) << (np.asarray(b(w), np.uint64) & 31)) & M32) | c(w)).astype(
            np.uint32
        ),
    )


@family("v_lshl_add_u32")
def _v_lshl_add_u32(s: Site) -> Exec:
    d, a, b, c = s.d, s.u32(1), s.u32(2), s.u32(3)
    return lambda w: w.vset(
        d,
        ((((np.asarray(a(w), np.uint64) << (np.asarray(b(w), np.uint64) & 31)) & M32) + c(w)) & M32).astype(
            np.uint32
        ),
    )


@family("v_or3_b32")
def _v_or3_b32(s: Site) -> Exec:
    d, a, b, c = s.d, s.u32(1), s.u32(2), s.u32(3)
    return lambda w: w.vset(d, _full(a(w) | b(w) | c(w), np.uint32))


@family("v_mad_u32_u24")
def _v_mad_u32_u24(s: Site) -> Exec:
    d, a, b, c = s.d, s.u32(1), s.u32(2), s.u32(3)
    return lambda w: w.vset(
        d, _full((_u24(a(w)) * _u24(b(w)) + np.asarray(c(w), np.uint64)) & M32, np.uint32)
    )


@family("v_and_or_b32")
def _v_and_or_b32(s: Site) -> Exec:
    d, a, b, c = s.d, s.u32(1), s.u32(2), s.u32(3)
    return lambda w: w.vset(d, _full((a(w) & b(w)) | c(w), np.uint32))


@family("v_xad_u32")
def _v_xad_u32(s: Site) -> Exec:
    """D = (S0 ^ S1) + S2, 32 bits."""
    d, a, b, c = s.d, s.u32(1), s.u32(2), s.u32(3)
    return lambda w: w.vset(
        d, _full(((np.asarray(a(w), np.uint64) ^ b(w)) + np.asarray(c(w), np.uint64)) & M32, np.uint32)
    )


@family("v_bfe_u32")
def _v_bfe_u32(s: Site) -> Exec:
    d, a, b, c = s.d, s.u32(1), s.u32(2), s.u32(3)

    def run(w: Wave) -> None:
        off = np.asarray(b(w), np.uint64) & 31
        width = np.asarray(c(w), np.uint64) & 31
        w.vset(
            d,
            _full((np.asarray(a(w), np.uint64) >> off) & ((np.uint64(1) << width) - np.uint64(1)), np.uint32),
        )

    return run


@family("v_perm_b32")
def _v_perm_b32(s: Site) -> Exec:
    d, a, b, c = s.d, s.u32(1), s.u32(2), s.u32(3)

    def run(w: Wave) -> None:
        sel = c(w)
        if isinstance(sel, int) and _perm_plain(sel):
            # A wave-uniform selector of source bytes only (the bf16 packing case): one gather.
            pool = np.empty((2, 64), np.uint32)
            pool[0], pool[1] = b(w), a(w)
            cols = _perm_cols(sel)
            w.vset(d, np.ascontiguousarray(pool.T).view(np.uint8)[:, cols].copy().view(np.uint32).ravel())
            return
        w.vset(d, perm_b32(_full(a(w), np.uint32), _full(b(w), np.uint32), _full(sel, np.uint32)))

    return run


@family("v_lshl_add_u64")
def _v_lshl_add_u64(s: Site) -> Exec:
    d, a, b, c = s.d, s.u64(1), s.u32(2), s.u64(3)

    def run(w: Wave) -> None:
        sh = np.asarray(b(w), np.uint64) & np.uint64(63)
        w.vset64(d, _full((np.asarray(a(w), np.uint64) << sh) + np.asarray(c(w), np.uint64), np.uint64))

    return run


@family("v_lshlrev_b64")
def _v_lshlrev_b64(s: Site) -> Exec:
    d, a, b = s.d, s.u32(1), s.u64(2)

    def run(w: Wave) -> None:
        sh = np.asarray(a(w), np.uint64) & np.uint64(63)
        w.vset64(d, _full(np.asarray(b(w), np.uint64) << sh, np.uint64))

    return run


# ---- vector ALU: ops with a carry or a scalar mask out ----


@family(*_CARRY_OPS)
def _valu_carry(s: Site) -> Exec:
    """VOP2/VOP3b with a carry (borrow) out in a lane mask and, for addc/subb, a carry in."""
    ops = s.ops
    d, sd = ops[0].index, ops[1].index
    a, b = s.u32(2), s.u32(3)
    add, rev, cin = _CARRY_OPS[s.name]
    cin_reg = (ops[4].index if len(ops) > 4 else VCC) if cin else None
    if "clamp" in s.ins.modifiers:
        raise UnsupportedInstruction(s.ins.text)

    def run(w: Wave) -> None:
        x = _full(a(w), np.uint32).astype(np.int64)
        y = _full(b(w), np.uint32).astype(np.int64)
        if rev:
            x, y = y, x
        c = w.lanes(cin_reg).astype(np.int64) if cin_reg is not None else 0
        r = x + y + c if add else x - y - c
        out = (r > 0xFFFFFFFF) if add else (r < 0)
        w.vset(d, (r & 0xFFFFFFFF).astype(np.uint32))
        w.set_mask_reg(sd, out & w.mask)

    return run


@family("v_mad_u64_u32")
def _v_mad_u64_u32(s: Site) -> Exec:
    d, sd = s.d, s.ops[1].index
    a, b, c = s.u32(2), s.u32(3), s.u64(4)

    def run(w: Wave) -> None:
        addend = _full(c(w), np.uint64)
        r = np.asarray(a(w), np.uint64) * np.asarray(b(w), np.uint64) + addend
        w.vset64(d, _full(r, np.uint64))
        w.set_mask_reg(sd, _full(r < addend, bool) & w.mask)

    return run


# ---- matrix cores ----


@family(*MFMA_PASSES)
def _mfma(s: Site) -> Exec:
    """The modelled bf16 MFMAs: VGPR operands, C a VGPR block or an inline constant (the literal 0
    of a first accumulation: the same value in every element), no broadcast or lane-group modifiers."""
    name, ins, meta = s.name, s.ins, s.meta
    d, a, b, c = s.ops[0], s.ops[1], s.ops[2], s.ops[3]
    nacc, core = (4, fp.mfma_f32_16x16x16_bf16) if "16x16" in name else (16, fp.mfma_f32_32x32x8_bf16)
    if (
        set(ins.modifiers) & {"cbsz", "abid", "blgp"}
        or not (d.kind == a.kind == b.kind == "v" and d.count == nacc and a.count == 2 and b.count == 2)
        or not (c.kind == "imm" or (c.kind == "v" and c.count == nacc))
    ):
        raise UnsupportedInstruction(ins.text)
    meta.mfma_ab = _regs(a, "v") + _regs(b, "v")
    meta.mfma_c = _regs(c, "v")
    meta.mfma_passes = MFMA_PASSES[name]
    di, ai, bi, ci = d.index, a.index, b.index, c.index
    c_imm = np.full((64, nacc), np.uint32(_imm32(c)).view(np.float32)) if c.kind == "imm" else None
    if nacc == 4:  # the 16x16x16 hot path: register-major operands through fp's gather tables
        c_regs = None if c_imm is None else np.ascontiguousarray(c_imm.T)

        def run16(w: Wave) -> None:
            acc = c_regs if c_regs is not None else w.vf[ci : ci + 4]
            res = fp.mfma_16x16x16_bf16_regs(w.v[ai : ai + 2], w.v[bi : bi + 2], acc).view(np.uint32)
            if w.full:
                w.v[di : di + 4] = res
            else:
                for r in range(4):
                    w.vset(di + r, res[r])

        return run16

    def run(w: Wave) -> None:
        acc = c_imm if c_imm is not None else w.vf[ci : ci + nacc].T
        res = core(w.v[ai : ai + 2].T, w.v[bi : bi + 2].T, acc)
        for r in range(nacc):
            w.vset(di + r, res[:, r].view(np.uint32))

    return run


# ---- memory: buffer, global, scratch, scalar ----

_DWORDS = {"": 1, "x2": 2, "x3": 3, "x4": 4}


@family(pattern=r"buffer_(load|store)_dword(x[234])?")
def _buffer(s: Site) -> Exec:
    """MUBUF buffer_load/store_dword[x2,x3,x4] over a raw buffer resource (CDNA3 ISA, "Buffer
    Instructions"): address = base + soffset + inst_offset + (offen ? vaddr : 0), every dword checked
    against num_records with soffset counted (machine.Wave._buffer_dwords), out-of-range loads read 0
    and stores are dropped. With `lds` the dword goes to LDS at M0 + inst_offset + 4 * lane instead
    of a VGPR."""
    ins, ops = s.ins, s.ops
    op, ndw = s.name.split("_")[1], _DWORDS[s.name.rsplit("dword", 1)[1]]
    mods = ins.modifiers
    lds = "lds" in mods
    if "offen" not in mods and ops[1 if not lds else 0].kind != "off":
        raise UnsupportedInstruction(f"{ins.text}: vaddr without offen/idxen")
    if lds and (op == "store" or ndw != 1):
        raise UnsupportedInstruction(ins.text)
    data_op: Operand | None = None
    if lds:
        vaddr, rsrc, soff = ops
    else:
        data_op, vaddr, rsrc, soff = ops
    if rsrc.kind != "s" or rsrc.count != 4:
        raise UnsupportedInstruction(f"{ins.text}: resource operand")
    inst_off = s.offset()
    voff = reader_u32(vaddr) if "offen" in mods else (lambda w: 0)
    sof = reader_u32(soff)
    ri = rsrc.index
    if lds:
        s.meta.sreads += (M0,)
        return lambda w: w.buffer_load_lds(w.s[ri : ri + 4], sof(w), voff(w), inst_off)
    assert data_op is not None
    di = data_op.index
    if op == "store":
        return lambda w: w.buffer_store(w.s[ri : ri + 4], sof(w), voff(w), inst_off, di, ndw)
    return lambda w: w.buffer_load(w.s[ri : ri + 4], sof(w), voff(w), inst_off, di, ndw)


@family(pattern=r"global_(load|store)_dword(x[234])?")
def _global_dword(s: Site) -> Exec:
    ops = s.ops
    store = s.name.startswith("global_store")
    ndw = _DWORDS[s.name.rsplit("dword", 1)[1]]
    data_op = ops[1] if store else ops[0]
    addr_op, saddr = (ops[0], ops[2]) if store else (ops[1], ops[2])
    offset = s.offset()
    if saddr.kind == "off":
        addr: Reader = reader_u64(addr_op)
    else:  # saddr + 32-bit vaddr offset
        s64, v32 = reader_u64(saddr), reader_u32(addr_op)
        addr = lambda w: np.uint64(s64(w)) + np.asarray(v32(w), np.uint64)  # noqa: E731
    di = data_op.index
    if store:
        return lambda w: w.global_store(addr(w), offset, di, ndw)
    return lambda w: w.global_load(addr(w), offset, di, ndw)


@family("global_store_short")
def _global_store_short(s: Site) -> Exec:
    addr16, off16, src16 = s.u64(0), s.offset(), s.ops[1].index
    if s.ops[2].kind != "off":
        raise UnsupportedInstruction(s.ins.text)
    return lambda w: w.global_store(addr16(w), off16, src16, 1, nbytes=2)


@family(pattern=r"scratch_(load|store)_dword(x[234])?")
def _scratch(s: Site) -> Exec:
    """Private memory (architected flat scratch): lane address = offset + vaddr + saddr."""
    ops = s.ops
    store = s.name.startswith("scratch_store")
    ndw = _DWORDS[s.name.rsplit("dword", 1)[1]]
    vaddr, data_op, saddr = (ops[0], ops[1], ops[2]) if store else (ops[1], ops[0], ops[2])
    offset = s.offset()
    va = reader_u32(vaddr) if vaddr.kind != "off" else (lambda w: 0)
    sa = reader_u32(saddr) if saddr.kind != "off" else (lambda w: 0)
    di = data_op.index
    return lambda w: w.scratch(np.asarray(va(w), np.uint64) + np.uint64(sa(w) + offset), di, ndw, store)


@family(pattern=r"s_load_dword(x2|x4|x8|x16)?")
def _s_load(s: Site) -> Exec:
    ndw = {"": 1, "x2": 2, "x4": 4, "x8": 8, "x16": 16}[s.name.removeprefix("s_load_dword")]
    d, base = s.d, s.u64(1)
    off = s.u32(2)
    return lambda w: w.smem_load(d, int(base(w)) + int(off(w)), ndw)


# ---- memory: LDS ----

# ds_read2*: (dwords per element, bytes per offset unit); the st64 forms step 64 elements.
_DS_READ2 = {
    "ds_read2_b32": (1, 4),
    "ds_read2_b64": (2, 8),
    "ds_read2st64_b32": (1, 256),
    "ds_read2st64_b64": (2, 512),
}


@family("ds_read_b128", "ds_read_b64", "ds_read_b32", "ds_write_b128", "ds_write_b64", "ds_write_b32")
def _ds_read_write(s: Site) -> Exec:
    nbytes = int(s.name.rsplit("_b", 1)[1]) // 8
    offset = s.offset()
    if s.name.startswith("ds_read"):
        d, a = s.d, s.u32(1)
        return lambda w: w.lds_read(a(w), offset, d, nbytes // 4)
    a, src = s.u32(0), s.ops[1].index
    return lambda w: w.lds_write(a(w), offset, src, nbytes // 4)


@family(*_DS_READ2)
def _ds_read2(s: Site) -> Exec:
    ndw, scale = _DS_READ2[s.name]
    d, a = s.d, s.u32(1)
    offs = (s.offset("offset0") * scale, s.offset("offset1") * scale)
    return lambda w: w.lds_read2(a(w), offs, d, ndw)


@family("ds_swizzle_b32")
def _ds_swizzle_b32(s: Site) -> Exec:
    d, a = s.d, s.u32(1)
    src_lane = swizzle_lanes(s.ins.modifiers.get("offset", "0"))
    return lambda w: w.ds_swizzle(d, a(w), src_lane)


@family("ds_permute_b32", "ds_bpermute_b32")
def _ds_permute(s: Site) -> Exec:
    d, a, src = s.d, s.u32(1), s.u32(2)
    offset = s.offset()
    if s.name == "ds_permute_b32":
        return lambda w: w.ds_permute(d, a(w), src(w), offset)
    return lambda w: w.ds_bpermute(d, a(w), src(w), offset)


# ---- the sequencer: waits, priority, barrier, end, branches ----


@family("s_nop")
def _s_nop(s: Site) -> Exec:
    s.meta.wait_states = int(s.ins.operands[0], 0) + 1
    return lambda w: None


@family("s_setprio")
def _s_setprio(s: Site) -> Exec:
    # Issue priority between the waves of a SIMD: no effect on results; the wave keeps it for a
    # scheduler that models arbitration.
    prio = int(s.ins.operands[0], 0) & 3

    def run(w: Wave) -> None:
        w.prio = prio

    return run


@family("s_waitcnt")
def _s_waitcnt(s: Site) -> Exec:
    vm, lgkm = _waitcnt(s.ins.operands)
    return lambda w: w.waitcnt(vm, lgkm)


@family("s_barrier")
def _s_barrier(s: Site) -> Exec:
    return lambda w: -1


@family("s_endpgm")
def _s_endpgm(s: Site) -> Exec:
    return lambda w: -2


_BRANCH_IF: dict[str, Callable[[Wave], bool]] = {
    "s_branch": lambda w: True,
    "s_cbranch_scc0": lambda w: w.scc == 0,
    "s_cbranch_scc1": lambda w: w.scc == 1,
    "s_cbranch_vccz": lambda w: (w.s[VCC] | w.s[VCC + 1]) == 0,
    "s_cbranch_vccnz": lambda w: (w.s[VCC] | w.s[VCC + 1]) != 0,
    "s_cbranch_execz": lambda w: w.exec == 0,
    "s_cbranch_execnz": lambda w: w.exec != 0,
}


@family(*_BRANCH_IF)
def _branch(s: Site) -> Exec:
    tgt_addr = s.ins.branch_target
    if tgt_addr not in s.index_of:
        raise UnsupportedInstruction(f"branch to 0x{tgt_addr:x} is not an instruction boundary")
    tgt = s.index_of[tgt_addr]
    s.meta.target = tgt
    cond = _BRANCH_IF[s.name]
    if s.name in ("s_cbranch_vccz", "s_cbranch_vccnz"):
        s.meta.sreads += (VCC, VCC + 1)
    return lambda w: tgt if cond(w) else None


# ---- scalar ALU ----


def _pick(w: Wave, first: bool, x: int, y: int) -> int:
    w.scc = int(first)
    return x if first else y


_SAVEEXEC: dict[str, Callable[[int, int], int]] = {
    "s_and_saveexec_b64": lambda s0, ex: s0 & ex,
    "s_or_saveexec_b64": lambda s0, ex: s0 | ex,
    "s_andn2_saveexec_b64": lambda s0, ex: s0 & ~ex,
}
_SALU_BIN32: dict[str, Callable[[Wave, int, int], int]] = {
    "s_add_u32": lambda w, x, y: w.carry(x + y),
    "s_addc_u32": lambda w, x, y: w.carry(x + y + w.scc),
    "s_sub_u32": lambda w, x, y: w.borrow(x - y),
    "s_add_i32": lambda w, x, y: w.overflow(_s32(x) + _s32(y)),
    "s_sub_i32": lambda w, x, y: w.overflow(_s32(x) - _s32(y)),
    "s_mul_i32": lambda w, x, y: (x * y) & M32,
    "s_mul_hi_u32": lambda w, x, y: (x * y) >> 32,
    "s_mul_hi_i32": lambda w, x, y: ((_s32(x) * _s32(y)) >> 32) & M32,
    "s_ashr_i32": lambda w, x, y: w.nz((_s32(x) >> (y & 31)) & M32),
    # min/max: SCC = 1 when S0 is the one chosen.
    "s_max_i32": lambda w, x, y: _pick(w, _s32(x) > _s32(y), x, y),
    "s_min_i32": lambda w, x, y: _pick(w, _s32(x) < _s32(y), x, y),
    "s_max_u32": lambda w, x, y: _pick(w, x > y, x, y),
    "s_min_u32": lambda w, x, y: _pick(w, x < y, x, y),
    "s_and_b32": lambda w, x, y: w.nz(x & y),
    "s_or_b32": lambda w, x, y: w.nz(x | y),
    "s_xor_b32": lambda w, x, y: w.nz(x ^ y),
    "s_andn2_b32": lambda w, x, y: w.nz(x & ~y & M32),
    "s_lshl_b32": lambda w, x, y: w.nz((x << (y & 31)) & M32),
    "s_lshr_b32": lambda w, x, y: w.nz(x >> (y & 31)),
}
_SALU_BIN64: dict[str, Callable[[Wave, int, int], int]] = {
    "s_and_b64": lambda w, x, y: w.nz(x & y),
    "s_or_b64": lambda w, x, y: w.nz(x | y),
    "s_xor_b64": lambda w, x, y: w.nz(x ^ y),
    "s_andn2_b64": lambda w, x, y: w.nz(x & ~y & M64),
    "s_orn2_b64": lambda w, x, y: w.nz((x | ~y) & M64),
    "s_lshl_b64": lambda w, x, y: w.nz((x << (y & 63)) & M64),
}
_S_CMP = {
    "lt": int.__lt__,
    "le": int.__le__,
    "gt": int.__gt__,
    "ge": int.__ge__,
    "eq": int.__eq__,
    "lg": int.__ne__,
}


@family(*_SALU_BIN32)
def _salu_bin32(s: Site) -> Exec:
    f2, d, a, b = _SALU_BIN32[s.name], s.d, s.u32(1), s.u32(2)
    return lambda w: w.sset(d, f2(w, a(w), b(w)))


@family(*_SALU_BIN64)
def _salu_bin64(s: Site) -> Exec:
    f2, d, a = _SALU_BIN64[s.name], s.d, s.u64(1)
    b = s.u32(2) if s.name == "s_lshl_b64" else s.u64(2)
    return lambda w: w.sset64(d, f2(w, a(w), b(w)))


@family("s_movk_i32")
def _s_movk_i32(s: Site) -> Exec:
    d, v = s.d, int(s.ins.operands[1], 0) & 0xFFFF
    v = (v - 0x10000 if v & 0x8000 else v) & M32
    return lambda w: w.sset(d, v)


@family("s_mov_b32")
def _s_mov_b32(s: Site) -> Exec:
    d, a = s.d, s.u32(1)
    return lambda w: w.sset(d, a(w))


@family("s_mov_b64")
def _s_mov_b64(s: Site) -> Exec:
    d, a = s.d, s.u64(1)
    return lambda w: w.sset64(d, a(w))


@family("s_cselect_b32")
def _s_cselect_b32(s: Site) -> Exec:
    d, a, b = s.d, s.u32(1), s.u32(2)
    return lambda w: w.sset(d, a(w) if w.scc else b(w))


@family("s_cselect_b64")
def _s_cselect_b64(s: Site) -> Exec:
    d, a, b = s.d, s.u64(1), s.u64(2)
    return lambda w: w.sset64(d, a(w) if w.scc else b(w))


@family(pattern=r"s_cmp_(lt|le|gt|ge|eq|lg)_.+")
def _s_cmp(s: Site) -> Exec:
    name = s.name
    f = _S_CMP[name.split("_")[2]]
    a, b = (s.u64(0), s.u64(1)) if name.endswith("_u64") else (s.u32(0), s.u32(1))
    signed = name.endswith("_i32")

    def run(w: Wave) -> None:
        x, y = a(w), b(w)
        if signed:
            x, y = _s32(x), _s32(y)
        w.scc = int(f(x, y))

    return run


@family(pattern=r"s_cmpk_(lt|le|gt|ge|eq|lg)_(u32|i32)")
def _s_cmpk(s: Site) -> Exec:
    """SOPK: SCC = S0 rel SIMM16, the constant zero-extended for _u32 and sign-extended for _i32."""
    rel, kind = s.name.split("_")[2:4]
    f, a, v = _S_CMP[rel], s.u32(0), int(s.ins.operands[1], 0) & 0xFFFF
    k = (v - 0x10000 if v & 0x8000 else v) if kind == "i32" else v

    def run(w: Wave) -> None:
        x = a(w)
        w.scc = int(f(_s32(x) if kind == "i32" else x, k))

    return run


@family("s_bitcmp0_b32", "s_bitcmp1_b32")
def _s_bitcmp(s: Site) -> Exec:
    """SCC = (bit S1[4:0] of S0) == 0 / 1."""
    a, b, want = s.u32(0), s.u32(1), int(s.name == "s_bitcmp1_b32")

    def run(w: Wave) -> None:
        w.scc = int((a(w) >> (b(w) & 31)) & 1 == want)

    return run


@family("s_not_b32")
def _s_not_b32(s: Site) -> Exec:
    d, a = s.d, s.u32(1)
    return lambda w: w.sset(d, w.nz(~a(w) & M32))


@family(*_SAVEEXEC)
def _s_saveexec(s: Site) -> Exec:
    """D = EXEC; EXEC = f(S0, EXEC); SCC = EXEC != 0."""
    d, a, fx = s.d, s.u64(1), _SAVEEXEC[s.name]

    def run(w: Wave) -> None:
        old = w.exec
        new = fx(a(w), old) & M64
        w.sset64(d, old)
        w.sset64(EXEC, new)
        w.scc = int(new != 0)

    return run


@family("s_addk_i32", "s_mulk_i32")
def _s_addk_mulk(s: Site) -> Exec:
    """D = D op sign-extended simm16; s_addk sets SCC on signed overflow, s_mulk leaves it."""
    d, v = s.d, int(s.ins.operands[1], 0) & 0xFFFF
    k = v - 0x10000 if v & 0x8000 else v
    s.meta.sreads += (d,)
    if s.name == "s_addk_i32":
        return lambda w: w.sset(d, w.overflow(_s32(w.s[d]) + k))
    return lambda w: w.sset(d, (_s32(w.s[d]) * k) & M32)


@family("s_abs_i32")
def _s_abs_i32(s: Site) -> Exec:
    d, a = s.d, s.u32(1)
    return lambda w: w.sset(d, w.nz(abs(_s32(a(w))) & M32))


@family("s_getpc_b64")
def _s_getpc_b64(s: Site) -> Exec:
    """The address of the next instruction in the loaded image (Launch.code_base + offset)."""
    d, nxt = s.d, s.ins.addr + 4
    return lambda w: w.sset64(d, w.getpc(nxt))


@family("s_bitset1_b32")
def _s_bitset1_b32(s: Site) -> Exec:
    d, a = s.d, s.u32(1)
    return lambda w: w.sset(d, w.s[d] | (1 << (a(w) & 31)))


@functools.cache
def _perm_plain(sel: int) -> bool:
    return all(((sel >> (8 * k)) & 0xFF) < 8 for k in range(4))


@functools.cache
def _perm_cols(sel: int) -> np.ndarray:
    return np.asarray([(sel >> (8 * k)) & 0xFF for k in range(4)], dtype=np.intp)


def perm_b32(s0: np.ndarray, s1: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """v_perm_b32: byte k of D picks from the 8 bytes {S0, S1} (S1 = bytes 0-3) by selector byte k;
    8-11 replicate the sign bit of bytes 1, 3, 5, 7; 12 gives 0x00, 13 and above 0xFF."""
    pool = np.empty((64, 2), dtype=np.uint32)
    pool[:, 0], pool[:, 1] = s1, s0
    pool8 = np.concatenate(
        [pool.view(np.uint8), np.zeros((64, 1), np.uint8), np.full((64, 1), 0xFF, np.uint8)], 1
    )
    sign = np.where(pool8[:, [1, 3, 5, 7]] & 0x80, 0xFF, 0).astype(np.uint8)
    pool8 = np.concatenate([pool8, sign], 1)  # 0-7 bytes, 8 zero, 9 0xFF, 10-13 signs of bytes 1,3,5,7
    sb = (sel[:, None] >> (np.arange(4, dtype=np.uint32) * 8)) & 0xFF  # [64, 4]
    col = np.where(sb < 8, sb, np.where(sb < 12, sb + 2, np.where(sb == 12, 8, 9))).astype(np.intp)
    out = np.take_along_axis(pool8, col, axis=1)
    return np.ascontiguousarray(out).view(np.uint32).reshape(64)
