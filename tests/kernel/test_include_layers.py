"""The kernel wing's include table of docs/architecture.md (issue 37), enforced like the Python layer
table: every `#include "..."` under kernel/ goes from a file's room to its own or one its row allows,
and never across backends. Only #include lines are read; no kernel rule is learned from the text."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "kernel"
DOC = ROOT / "docs" / "architecture.md"
SOURCES = (".h", ".cuh", ".hip", ".cu", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
BACKENDS = ("hip", "cuda", "cpu")


def table(text: str) -> list[tuple[str, list[str], set[str]]]:
    """(room, file patterns, rooms it may include), in the table's order (the first match wins)."""
    body = text.split("<!-- kernel-layers -->")[1].split("<!-- /kernel-layers -->")[0]
    rows = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        room = cells[0].strip("`")
        patterns = re.findall(r"`([^`]+)`", cells[1])
        may = set(re.findall(r"`([^`]+)`", cells[2]))
        rows.append((room, patterns, may))
    return rows


def room_of(rel: str, rows: list[tuple[str, list[str], set[str]]]) -> str | None:
    for room, patterns, _ in rows:
        if any(fnmatch.fnmatchcase(rel, p) and rel.count("/") == p.count("/") for p in patterns):
            return room
    return None


def resolve(src: Path, name: str) -> Path | None:
    """As the compilers find it: beside the file, then -Ikernel, then -Ikernel/include."""
    for base in (src.parent, KERNEL, KERNEL / "include"):
        cand = (base / name).resolve()
        if cand.is_file():
            return cand
    return None


def edges() -> list[tuple[str, str]]:
    out = []
    for src in sorted(p for p in KERNEL.rglob("*") if p.suffix in SOURCES and p.is_file()):
        for name in INCLUDE.findall(src.read_text(errors="replace")):
            dst = resolve(src, name)
            rel_src = src.relative_to(ROOT).as_posix()
            assert dst is not None, f'{rel_src}: #include "{name}" names no file of the tree'
            out.append((rel_src, dst.relative_to(ROOT).as_posix()))
    return out


def violations(rows: list[tuple[str, list[str], set[str]]], links: list[tuple[str, str]]) -> list[str]:
    allowed = {room: may for room, _, may in rows}
    bad = []
    for src, dst in links:
        a, b = room_of(src, rows), room_of(dst, rows)
        if a is None or b is None:
            bad.append(f"{src if a is None else dst} is in no room of the kernel-wing table")
            continue
        side = {be for be in BACKENDS for f in (src, dst) if f.startswith(f"kernel/{be}/")}
        if len(side) > 1:
            bad.append(f"{src} includes {dst}: another backend's file")
        elif b != a and b not in allowed[a]:
            bad.append(f"{src} ({a}) includes {dst} ({b}): not on {a}'s row")
    return bad


def test_every_kernel_source_has_a_room() -> None:
    rows = table(DOC.read_text())
    assert {r for r, _, _ in rows} >= {"abi", "plan", "kernels", "parts"}
    files = [p.relative_to(ROOT).as_posix() for p in KERNEL.rglob("*") if p.suffix in SOURCES]
    assert files
    lost = [f for f in files if room_of(f, rows) is None]
    assert not lost, f"place {lost} in the kernel-wing table of docs/architecture.md"


def test_includes_follow_the_table() -> None:
    bad = violations(table(DOC.read_text()), edges())
    assert not bad, "includes the kernel-wing table does not allow:\n" + "\n".join(bad)


def test_the_rule_catches_what_it_forbids() -> None:
    """A part including the plan, a planner including a device part, the ABI including anything,
    and a HIP file including a CUDA one: each found (the table's own rows, made-up edges)."""
    rows = table(DOC.read_text())
    forged = [
        ("kernel/hip/parts/mainloop.h", "kernel/hip/parts/plan.h"),
        ("kernel/hip/plan_host.cpp", "kernel/hip/parts/mfma.h"),
        ("kernel/include/regress_attn.h", "kernel/common/bf16.h"),
        ("kernel/hip/attention_gfx942.hip", "kernel/cuda/params.cuh"),
        ("kernel/hip/parts/plan.h", "kernel/hip/attention_gfx942.hip"),
        ("kernel/hip/new_thing.inc.h", "kernel/common/bf16.h"),
    ]
    found = violations(rows, forged)
    assert len(found) == len(forged), found
    assert not violations(rows, [("kernel/hip/parts/plan.h", "kernel/hip/parts/layout.h")])
