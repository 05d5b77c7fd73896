"""A gfx942 code object as the emulator needs it: kernels, their descriptors, kernarg layouts and
decoded instructions.

The ELF (sections, symbols, the NT_AMDGPU_METADATA note in MessagePack) is read here from the
bytes. Instructions are decoded by llvm-objdump-19, the LLVM disassembler for exactly this
target, and every decoded instruction is tied back to the binary: its encoding words must equal the
bytes of .text at its address and the instructions must tile each kernel's symbol range without gap.
So the emulator runs what the file holds, and an unknown or mis-decoded word cannot slip through.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OBJDUMP = "llvm-objdump-19"
EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
EF_AMDGPU_MACH_GFX942 = 0x4C  # e_flags & EF_AMDGPU_MACH (LLVM AMDGPUUsage, "ELF Header")


class CodeObjectError(RuntimeError):
    """The file is not a gfx942 code object the emulator can run."""


# --- ELF -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    shndx: int
    kind: int  # STT_*


def _sections(data: bytes) -> list[Section]:
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise CodeObjectError("not an ELF64 file")
    (e_machine,) = struct.unpack_from("<H", data, 18)
    if e_machine != EM_AMDGPU:
        raise CodeObjectError(f"ELF machine {e_machine} is not EM_AMDGPU ({EM_AMDGPU})")
    (e_shoff,) = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    strtab = raw[e_shstrndx]
    out = []
    for name, typ, _flags, addr, off, size, link, _info, _align, entsize in raw:
        s = data[strtab[4] + name :]
        out.append(Section(s[: s.index(0)].decode(), typ, addr, off, size, link, entsize))
    return out


def _symbols(data: bytes, sections: list[Section]) -> list[Symbol]:
    syms: list[Symbol] = []
    for sec in sections:
        if sec.type not in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
            continue
        strtab = sections[sec.link]
        for i in range(sec.size // 24):
            name, info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, sec.offset + i * 24)
            s = data[strtab.offset + name :]
            syms.append(Symbol(s[: s.index(0)].decode(), value, size, shndx, info & 0xF))
    return syms


def _notes(data: bytes, sections: list[Section]) -> list[tuple[str, int, bytes]]:
    notes = []
    for sec in sections:
        if sec.type != 7:  # SHT_NOTE
            continue
        pos, end = sec.offset, sec.offset + sec.size
        while pos + 12 <= end:
            namesz, descsz, typ = struct.unpack_from("<III", data, pos)
            pos += 12
            name = data[pos : pos + namesz].rstrip(b"\0").decode()
            pos += (namesz + 3) & ~3
            notes.append((name, typ, data[pos : pos + descsz]))
            pos += (descsz + 3) & ~3
    return notes


def unpack_msgpack(buf: bytes) -> Any:
    """The MessagePack subset the AMDGPU metadata uses (maps, arrays, strings, ints, bools, floats)."""

    def item(p: int) -> tuple[Any, int]:
        b = buf[p]
        if b <= 0x7F:
            return b, p + 1
        if b >= 0xE0:
            return b - 0x100, p + 1
        if 0x80 <= b <= 0x8F:
            return mapping(b & 0x0F, p + 1)
        if 0x90 <= b <= 0x9F:
            return array(b & 0x0F, p + 1)
        if 0xA0 <= b <= 0xBF:
            n = b & 0x1F
            return buf[p + 1 : p + 1 + n].decode(), p + 1 + n
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if b in simple:
            return simple[b], p + 1
        fixed = {
            0xCC: "B",
            0xCD: ">H",
            0xCE: ">I",
            0xCF: ">Q",
            0xD0: "b",
            0xD1: ">h",
            0xD2: ">i",
            0xD3: ">q",
            0xCA: ">f",
            0xCB: ">d",
        }
        if b in fixed:
            fmt = fixed[b]
            return struct.unpack_from(fmt, buf, p + 1)[0], p + 1 + struct.calcsize(fmt)
        if b in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
            width = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}[b]
            n = int.from_bytes(buf[p + 1 : p + 1 + width], "big")
            raw = buf[p + 1 + width : p + 1 + width + n]
            return (raw.decode() if b >= 0xD9 else raw), p + 1 + width + n
        if b in (0xDC, 0xDD, 0xDE, 0xDF):
            width = 2 if b in (0xDC, 0xDE) else 4
            n = int.from_bytes(buf[p + 1 : p + 1 + width], "big")
            return (array if b in (0xDC, 0xDD) else mapping)(n, p + 1 + width)
        raise CodeObjectError(f"metadata: unsupported MessagePack byte 0x{b:02x}")

    def array(n: int, p: int) -> tuple[list[Any], int]:
        out = []
        for _ in range(n):
            v, p = item(p)
            out.append(v)
        return out, p

    def mapping(n: int, p: int) -> tuple[dict[Any, Any], int]:
        out = {}
        for _ in range(n):
            k, p = item(p)
            v, p = item(p)
            out[k] = v
        return out, p

    return item(0)[0]


# --- kernel descriptor --------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte amdhsa kernel descriptor (LLVM AMDGPUUsage, "Kernel Descriptor")."""

    group_segment_size: int
    private_segment_size: int
    kernarg_size: int
    entry_offset: int
    rsrc1: int
    rsrc2: int
    rsrc3: int
    code_properties: int

    @classmethod
    def parse(cls, raw: bytes) -> KernelDescriptor:
        if len(raw) != 64:
            raise CodeObjectError(f"kernel descriptor is {len(raw)} bytes, expected 64")
        grp, priv, karg = struct.unpack_from("<III", raw, 0)
        (entry,) = struct.unpack_from("<q", raw, 16)
        rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
        (props,) = struct.unpack_from("<H", raw, 56)
        return cls(grp, priv, karg, entry, rsrc1, rsrc2, rsrc3, props)

    # compute_pgm_rsrc1
    @property
    def float_denorm_mode_32(self) -> int:  # 0 flush src+dst, 3 preserve
        return (self.rsrc1 >> 16) & 3

    @property
    def float_round_mode_32(self) -> int:  # 0 round to nearest even
        return (self.rsrc1 >> 12) & 3

    @property
    def ieee_mode(self) -> bool:
        return bool((self.rsrc1 >> 23) & 1)

    @property
    def dx10_clamp(self) -> bool:
        return bool((self.rsrc1 >> 21) & 1)

    # compute_pgm_rsrc2
    @property
    def user_sgpr_count(self) -> int:
        return (self.rsrc2 >> 1) & 0x1F

    @property
    def workgroup_id_enabled(self) -> tuple[bool, bool, bool]:
        return tuple(bool((self.rsrc2 >> b) & 1) for b in (7, 8, 9))  # type: ignore[return-value]

    @property
    def workgroup_info_enabled(self) -> bool:
        return bool((self.rsrc2 >> 10) & 1)

    @property
    def private_segment_enabled(self) -> bool:
        return bool(self.rsrc2 & 1)

    @property
    def vgpr_workitem_id(self) -> int:  # 0: x, 1: x y, 2: x y z
        return (self.rsrc2 >> 11) & 3

    # kernel_code_properties: which user SGPRs are set up, in this order (AMDGPUUsage).
    USER_SGPRS = (
        ("private_segment_buffer", 4),
        ("dispatch_ptr", 2),
        ("queue_ptr", 2),
        ("kernarg_segment_ptr", 2),
        ("dispatch_id", 2),
        ("flat_scratch_init", 2),
        ("private_segment_size", 1),
    )

    def user_sgpr_layout(self) -> list[tuple[str, int, int]]:
        """(name, first SGPR, count) of every enabled user SGPR, in hardware order."""
        out, at = [], 0
        for bit, (name, n) in enumerate(self.USER_SGPRS):
            if (self.code_properties >> bit) & 1:
                out.append((name, at, n))
                at += n
        return out

    @property
    def wave32(self) -> bool:
        return bool((self.code_properties >> 10) & 1)


# --- instructions -------------------------------------------------------------------------------


@dataclass
class Instr:
    addr: int  # byte offset from the kernel's entry
    size: int
    mnemonic: str
    operands: list[str]
    modifiers: dict[str, str]
    words: tuple[int, ...]
    text: str

    @property
    def branch_target(self) -> int | None:
        """SOPP branch target (entry-relative), from the encoded simm16: PC + 4 + 4·simm16."""
        if not (self.mnemonic.startswith("s_cbranch") or self.mnemonic == "s_branch"):
            return None
        simm = self.words[0] & 0xFFFF
        simm -= 0x10000 if simm & 0x8000 else 0
        return self.addr + 4 + 4 * simm


_LINE = re.compile(r"^\s+(?P<body>\S.*?)\s*//\s*(?P<addr>[0-9A-Fa-f]+):\s*(?P<words>(?:[0-9A-Fa-f]{8}\s*)+)")
_MOD = re.compile(r"\s(\w+):(\[[^\]]*\]|\S+)")


def parse_instruction(body: str, addr: int, words: tuple[int, ...]) -> Instr:
    mnemonic, _, rest = body.strip().partition(" ")
    mods = {m.group(1): m.group(2) for m in _MOD.finditer(" " + rest)}
    rest = _MOD.sub("", " " + rest).strip()
    ops = [o.strip() for o in rest.split(",")] if rest else []
    if mnemonic == "s_waitcnt":
        ops = rest.split()
    elif ops and " " in ops[-1]:
        # Bare flags after the last operand (`offen`, `lds`, `sc0`, ...) become modifiers with an
        # empty value (a `key:value` modifier never has one); isa.compile_instruction refuses any
        # flag it does not model.
        last, *flags = ops[-1].split()
        ops[-1] = last
        mods.update({f: "" for f in flags})
    return Instr(addr, 4 * len(words), mnemonic, ops, mods, words, body.strip())


@dataclass
class Kernel:
    name: str
    descriptor: KernelDescriptor
    metadata: dict[str, Any]
    instructions: list[Instr] = field(default_factory=list)
    compiled: Any = field(default=None, repr=False, compare=False)  # machine.compiled() fills it
    source: str = ""  # the code object's path, for messages

    @property
    def args(self) -> list[dict[str, Any]]:
        return list(self.metadata.get(".args", []))

    @property
    def kernarg_size(self) -> int:
        """The descriptor's kernarg size, or the metadata's where the descriptor leaves it 0 (AITER)."""
        return self.descriptor.kernarg_size or int(self.metadata.get(".kernarg_segment_size", 0))

    @property
    def sgpr_count(self) -> int:
        return int(self.metadata.get(".sgpr_count", 0))

    @property
    def vgpr_count(self) -> int:
        return int(self.metadata.get(".vgpr_count", 0))


@dataclass
class CodeObject:
    path: Path
    sha256: str
    target: str
    kernels: dict[str, Kernel]

    @classmethod
    def load(cls, path: str | Path) -> CodeObject:
        path = Path(path)
        try:
            return cls._load(path)
        except CodeObjectError as exc:
            msg = str(exc)
            raise CodeObjectError(msg if msg.startswith(str(path)) else f"{path}: {msg}") from None
        except OSError as exc:  # missing, a directory, unreadable: one line, not a traceback
            raise CodeObjectError(f"{path}: cannot read the code object: {exc.strerror or exc}") from None
        except (struct.error, IndexError, ValueError, KeyError, TypeError, RecursionError) as exc:
            # A truncated or corrupt ELF: its offsets point past the bytes or at garbage.
            raise CodeObjectError(f"{path}: not a well-formed ELF code object ({exc})") from None

    @classmethod
    def _load(cls, path: Path) -> CodeObject:
        data = path.read_bytes()
        sections = _sections(data)
        symbols = _symbols(data, sections)
        meta: dict[str, Any] = {}
        for name, typ, desc in _notes(data, sections):
            if name == "AMDGPU" and typ == NT_AMDGPU_METADATA:
                meta = unpack_msgpack(desc)
        if not meta:
            raise CodeObjectError(f"{path}: no AMDGPU metadata note")
        target = str(meta.get("amdhsa.target", ""))
        if not target and _e_flags(data) & 0xFF == EF_AMDGPU_MACH_GFX942:
            # Hand-written assembly (AITER's objects) may leave amdhsa.target out; e_flags names the chip.
            target = "amdgcn-amd-amdhsa--gfx942"
        if "gfx942" not in target:
            raise CodeObjectError(f"{path}: target {target!r} is not gfx942")
        by_name = {s.name: s for s in symbols}
        text = next((s for s in sections if s.name == ".text"), None)
        if text is None:
            raise CodeObjectError(f"{path}: no .text section")
        disasm = _disassemble(path)
        kernels: dict[str, Kernel] = {}
        for km in meta.get("amdhsa.kernels", []):
            name = str(km[".name"])
            kd_sym = by_name.get(str(km[".symbol"]))
            fn = by_name.get(name)
            if kd_sym is None or fn is None:
                raise CodeObjectError(f"{path}: kernel {name} lacks its symbol or descriptor")
            kd_sec = sections[kd_sym.shndx]
            raw = data[kd_sec.offset + kd_sym.value - kd_sec.addr :][:64]
            kd = KernelDescriptor.parse(raw)
            if kd_sym.value + kd.entry_offset != fn.value:
                raise CodeObjectError(f"{name}: descriptor entry offset does not point at the kernel")
            instrs = _kernel_instructions(
                name, fn.value, _function_end(fn, symbols, text), text, data, disasm
            )
            kernels[name] = Kernel(name, kd, km, instrs, source=str(path))
        return cls(path, hashlib.sha256(data).hexdigest(), target, kernels)


def _e_flags(data: bytes) -> int:
    return int(struct.unpack_from("<I", data, 0x30)[0])


def _function_end(fn: Symbol, symbols: list[Symbol], text: Section) -> int:
    """The end of a kernel's code: its symbol size, or, where the assembler left it 0 (hand-written
    code objects), the next function symbol in .text or the end of .text."""
    if fn.size:
        return fn.value + fn.size
    later = [s.value for s in symbols if s.kind == 2 and s.shndx == fn.shndx and s.value > fn.value]
    return min(later, default=text.addr + text.size)


def _disassemble(path: Path) -> list[tuple[str, int, tuple[int, ...]]]:
    """Every decoded instruction of the file in address order (local labels, which split the listing
    into blocks, do not matter: kernels are cut out by address)."""
    exe = shutil.which(OBJDUMP)
    if exe is None:
        raise CodeObjectError(f"{OBJDUMP} not found on PATH (Debian package llvm-19)")
    done = subprocess.run([exe, "-d", "--mcpu=gfx942", str(path)], capture_output=True, text=True)
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise CodeObjectError(f"{OBJDUMP} cannot disassemble it: {tail}")
    out = done.stdout
    lines: list[tuple[str, int, tuple[int, ...]]] = []
    for line in out.splitlines():
        if m := _LINE.match(line):
            words = tuple(int(w, 16) for w in m.group("words").split())
            lines.append((m.group("body"), int(m.group("addr"), 16), words))
    lines.sort(key=lambda x: x[1])
    return lines


def _kernel_instructions(
    name: str,
    start: int,
    end: int,
    text: Section,
    data: bytes,
    disasm: list[tuple[str, int, tuple[int, ...]]],
) -> list[Instr]:
    lines = [x for x in disasm if start <= x[1] < end]
    if not lines:
        raise CodeObjectError(f"{name}: not found in the disassembly")
    out: list[Instr] = []
    expect = start
    for body, addr, words in lines:
        if addr != expect:
            raise CodeObjectError(f"{name}: gap in the decoded instructions at 0x{expect:x}")
        raw = data[text.offset + addr - text.addr :][: 4 * len(words)]
        if struct.unpack(f"<{len(words)}I", raw) != words:
            raise CodeObjectError(f"{name}: decoded words at 0x{addr:x} differ from the code object's bytes")
        out.append(parse_instruction(body, addr - start, words))
        expect = addr + 4 * len(words)
    if expect != end:
        raise CodeObjectError(f"{name}: decoded instructions end at 0x{expect:x}, its code ends at 0x{end:x}")
    return out


# --- the loaded image ----------------------------------------------------------------------------

PT_LOAD = 1
SHT_RELA = 4
R_AMDGPU_ABS64 = 3
R_AMDGPU_RELATIVE64 = 13


@dataclass
class CodeImage:
    """The code object as a loader places it: every PT_LOAD segment at base + its vaddr (the tail
    of each zero-filled, as .bss is), dynamic relocations applied. Kernels that reach their own
    globals (`s_getpc_b64` + a GOT entry, a `__device__` array the host fills) need this mapped
    into the emulator's memory; `buf` is that writable host memory."""

    buf: Any  # numpy uint8 array
    symbols: dict[str, int]  # name -> vaddr

    @property
    def base(self) -> int:
        return int(self.buf.ctypes.data)

    def addr(self, name: str) -> int:
        if name not in self.symbols:
            raise CodeObjectError(f"no symbol {name} in the code object")
        return self.base + self.symbols[name]

    def view(self, name: str, nbytes: int) -> Any:
        """A writable uint8 view of `nbytes` at symbol `name` (to fill a __device__ variable)."""
        at = self.symbols[name]
        return self.buf[at : at + nbytes]


def load_image(code: CodeObject) -> CodeImage:
    import numpy as np

    data = code.path.read_bytes()
    sections = _sections(data)
    (e_phoff,) = struct.unpack_from("<Q", data, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 0x36)
    loads = []
    for i in range(e_phnum):
        typ, _flags, off, vaddr, _paddr, filesz, memsz, _align = struct.unpack_from(
            "<IIQQQQQQ", data, e_phoff + i * e_phentsize
        )
        if typ == PT_LOAD:
            loads.append((off, vaddr, filesz, memsz))
    if not loads:
        raise CodeObjectError(f"{code.path}: no loadable segment")
    # Page-aligned host memory, so that the image keeps the alignments its segments ask for.
    size = max(v + m for _, v, _, m in loads)
    raw = np.zeros(size + 4096, dtype=np.uint8)
    start = (-raw.ctypes.data) % 4096
    buf = raw[start : start + size]
    for off, vaddr, filesz, _memsz in loads:
        buf[vaddr : vaddr + filesz] = np.frombuffer(data, np.uint8, filesz, off)
    base = int(buf.ctypes.data)
    for sec in sections:
        if sec.type != SHT_RELA:
            continue
        symtab = sections[sec.link]
        for i in range(sec.size // 24):
            r_off, r_info, r_add = struct.unpack_from("<QQq", data, sec.offset + i * 24)
            kind, sym = r_info & 0xFFFFFFFF, r_info >> 32
            if kind == R_AMDGPU_RELATIVE64:
                value = base + r_add
            elif kind == R_AMDGPU_ABS64:
                _name, _info, _other, shndx, sym_value, _size = struct.unpack_from(
                    "<IBBHQQ", data, symtab.offset + sym * 24
                )
                if shndx == 0:
                    raise CodeObjectError(f"{code.path}: relocation against an undefined symbol")
                value = base + sym_value + r_add
            else:
                raise CodeObjectError(f"{code.path}: relocation type {kind} is not supported")
            buf[r_off : r_off + 8] = np.frombuffer(struct.pack("<Q", value & (2**64 - 1)), np.uint8)
    symbols = {s.name: s.value for s in _symbols(data, sections) if s.shndx}
    return CodeImage(buf, symbols)  # buf is a view: it keeps `raw` alive
