"""Proof that a kernel-wing clean-up left the gfx942 code object alone (issue 37).

Builds the default compile-only gfx942 code object twice with the exact argv of
`regress.build.COMMANDS["hip-compile-only"]` (the one build path), both times in the SAME scratch
folder (clang derives the object's CUID from the source path, so two paths would differ by that
alone): first the kernel/ of a base commit (`git archive`), then the kernel/ of the working tree.
Compares the two with cmp; when they differ, compares `llvm-objdump-19 -d` text per kernel. Also
counts, on both sides, the HIP build flags (settable `#ifndef RA_HIP_*` guards) and the
preprocessor conditionals plus flag-valued `if (RA_HIP_*)` tests in the files of the default build.

    python benchmarks/mi300x/hip_identity.py [--base 8814587] [--per-kernel]

Does the same for the live flag's other value and each fire-drill build. Prints two short tables
last (--per-kernel: a third, each kernel of the default build: disassembly identical or not, and its
instruction count on both sides). Exit 0 when every pair of objects is byte-identical, 1 otherwise.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from regress.native.build import COMMANDS, OUT, REPO_ROOT, build_argv, inject_flags

RECIPE = COMMANDS["hip-compile-only"]
# The default object, the live flag's other value and each fire drill: every one must stay the same.
VARIANTS: list[tuple[str, ...]] = [
    (),
    ("-DRA_HIP_MFMA_BUILTIN=1",),
    *(
        tuple(inject_flags({k: v}))
        for k, v in (("ulp", 2), ("slowdown_pct", 25), ("nondeterminism", 1), ("round_swap", 5))
    ),
]
CONDITIONAL = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif)\b|\bif\s*\(\s*!?RA_HIP_\w+", re.M)
FLAG_GUARD = re.compile(r"^\s*#ifndef (RA_HIP_\w+)$|defined\((RA_HIP_\w+)\)", re.M)
DERIVED = {"RA_HIP_HAVE_RUNTIME"}  # set by compat.h from the headers found, not by a build


def build(tree: Path, out: Path, flags: tuple[str, ...] = ()) -> str:
    argv = [str(out) if a == OUT else a for a in build_argv(RECIPE, None, flags)]
    proc = subprocess.run(argv, cwd=tree, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"build failed in {tree}:\n{proc.stderr[-3000:]}")
    return proc.stderr


def counts(kernel: Path) -> tuple[int, int]:
    """(HIP build flags, conditionals) over kernel/hip (the TU and its parts; the CPU and CUDA
    sources are not in the gfx942 build)."""
    files = sorted(p for p in (kernel / "hip").rglob("*") if p.suffix in (".h", ".hip"))
    flags: set[str] = set()
    conds = 0
    for f in files:
        text = f.read_text()
        found = {a or b for a, b in FLAG_GUARD.findall(text)}
        flags |= {f for f in found if not f.endswith("_H")} - DERIVED  # include guards are no flags
        body = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # conditionals named in comments do not count
        conds += len(CONDITIONAL.findall(body)) - len(re.findall(r"^\s*#\s*ifndef RA_HIP_\w+_H$", body, re.M))
    return len(flags), conds


def disasm(co: Path) -> str:
    objdump = shutil.which("llvm-objdump-19") or sys.exit("llvm-objdump-19 is needed")
    text = subprocess.run([objdump, "-d", str(co)], capture_output=True, text=True, check=True).stdout
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith(str(co)))


def kernels(co: Path) -> dict[str, list[str]]:
    """Each kernel's instructions (the objdump text without addresses and encodings)."""
    out: dict[str, list[str]] = {}
    name = None
    for ln in disasm(co).splitlines():
        if m := re.match(r"^[0-9a-f]+ <(\w+)>:", ln):
            name = m.group(1)
            out[name] = []
        elif name and ln.strip():
            out[name].append(ln.split("//")[0].strip())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="8814587", help="the commit to compare against (default 8814587)")
    ap.add_argument("--per-kernel", action="store_true", help="also a table per kernel of the default build")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hip-identity-") as tmp:
        root = Path(tmp)
        tree = root / "tree"
        objs: dict[str, tuple[list[Path], tuple[int, int]]] = {}
        for side in ("base", "ours"):
            shutil.rmtree(tree, ignore_errors=True)
            tree.mkdir()
            if side == "base":
                tar = subprocess.run(
                    ["git", "archive", args.base, "kernel"], cwd=REPO_ROOT, capture_output=True, check=True
                ).stdout
                subprocess.run(["tar", "-x", "-C", str(tree)], input=tar, check=True)
            else:
                shutil.copytree(REPO_ROOT / "kernel", tree / "kernel")
            paths = []
            for i, flags in enumerate(VARIANTS):
                out = tree / RECIPE.output
                build(tree, out, flags)
                paths.append(root / f"{side}-{i}.co")
                shutil.copy(out, paths[-1])
            objs[side] = (paths, counts(tree / "kernel"))
        print("| build | byte-identical | disassembly identical | size |")
        print("|---|---|---|---|")
        all_same = True
        for i, flags in enumerate(VARIANTS):
            a, b = objs["base"][0][i], objs["ours"][0][i]
            same = filecmp.cmp(a, b, shallow=False)
            asm_same = same or disasm(a) == disasm(b)
            all_same &= same
            name, yes = " ".join(flags) or "default", {True: "yes", False: "no"}
            print(f"| {name} | {yes[same]} | {yes[asm_same]} | {b.stat().st_size} B |")
        print()
        print("| side | HIP build flags | conditionals in kernel/hip |")
        print("|---|---|---|")
        print(f"| {args.base} | {objs['base'][1][0]} | {objs['base'][1][1]} |")
        print(f"| working tree | {objs['ours'][1][0]} | {objs['ours'][1][1]} |")
        if args.per_kernel:
            ka, kb = kernels(objs["base"][0][0]), kernels(objs["ours"][0][0])
            print()
            print(f"| kernel (default build) | disassembly identical | instructions {args.base} -> ours |")
            print("|---|---|---|")
            for k in sorted(ka.keys() | kb.keys()):
                same = {True: "yes", False: "no"}[ka.get(k) == kb.get(k)]
                print(f"| {k} | {same} | {len(ka.get(k, []))} -> {len(kb.get(k, []))} |")
        return 0 if all_same else 1


if __name__ == "__main__":
    raise SystemExit(main())
