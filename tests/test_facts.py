"""The suite and backend tables (regress.facts.suite_facts, regress.facts.backends) are the only statement of
their facts: the readers agree with them, and no module of the package restates one."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import click
import pytest

from regress.cli.commands.options import backend as backend_option
from regress.facts import backends, suite_facts
from regress.facts.results import LAYOUTS, ROUNDING_MODES
from regress.native.build import COMMANDS
from regress.run.suites import SUITES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "regress"


@functools.cache
def _trees() -> tuple[tuple[str, ast.Module], ...]:
    """Every module of the package and the benchmarks, parsed once for all the tests here:
    (path relative to the root, tree)."""
    paths = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])
    return tuple((p.relative_to(ROOT).as_posix(), ast.parse(p.read_text(), str(p))) for p in paths)


def test_the_suite_table_names_the_suites_the_package_runs_in_their_order() -> None:
    assert tuple(SUITES) == suite_facts.DEFAULT_SUITES
    assert suite_facts.TIMED_SUITES == ("perf", "e2e")
    assert suite_facts.EXACT_SUITES == ("determinism", "ulp")


def test_a_backend_without_a_clock_runs_the_untimed_suites_only() -> None:
    assert suite_facts.suites_for("hip-emu") == ("determinism", "ulp")
    for name in ("cpu", "cuda", "hip"):
        assert suite_facts.suites_for(name) == suite_facts.DEFAULT_SUITES


def test_every_backend_builds_with_a_recipe_the_build_knows() -> None:
    for b in backends.BACKENDS.values():
        assert b.recipe_for(False) in COMMANDS and b.recipe_for(True) in COMMANDS
    assert backends.BACKENDS["hip-emu"].recipe_for(False) == backends.BACKENDS["hip"].recipe_for(True)


def test_the_cli_offers_the_backends_of_the_table() -> None:
    @click.command()
    @backend_option
    def cmd(backend: str) -> None:
        pass

    choice = next(p for p in cmd.params if p.name == "backend").type
    assert isinstance(choice, click.Choice) and tuple(choice.choices) == backends.CHOICES


def test_resolving_auto_without_a_gpu_gives_cpu_and_an_unknown_name_is_refused() -> None:
    assert backends.gpu_backend("6.2") == "hip" and backends.gpu_backend(None) == "cuda"
    assert backends.resolve("hip-emu") == "hip-emu"
    import torch

    if not torch.cuda.is_available():  # what the name promises: auto on a machine without a GPU
        assert backends.resolve("auto") == "cpu"
    with pytest.raises(ValueError, match="unknown backend 'rocm'"):
        backends.resolve("rocm")


def _strings(node: ast.AST) -> frozenset[str] | None:
    """The strings of a tuple, list or set literal made only of two or more strings, else None."""
    if not isinstance(node, ast.Tuple | ast.List | ast.Set) or len(node.elts) < 2:
        return None
    values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return frozenset(values) if len(values) == len(node.elts) else None


def _reads_torch_hip(node: ast.AST) -> bool:
    """torch.version.hip, or getattr(torch.version, "hip")."""
    if isinstance(node, ast.Attribute) and node.attr == "hip":
        return isinstance(node.value, ast.Attribute) and node.value.attr == "version"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and any(isinstance(a, ast.Constant) and a.value == "hip" for a in node.args[1:])
    )


def test_no_module_restates_which_suites_are_timed_or_which_backends_are_alike() -> None:
    suites, names = set(suite_facts.SUITES), set(backends.BACKENDS)
    found = []
    for root_rel, tree in _trees():
        rel = root_rel.removeprefix("regress/")
        for node in ast.walk(tree):
            strings = _strings(node)
            if strings and strings <= suites and rel != "facts/suite_facts.py":
                found.append(f"{rel}:{node.lineno}: suites {sorted(strings)}")  # type: ignore[attr-defined]
            if strings and strings <= names and rel != "facts/backends.py":
                found.append(f"{rel}:{node.lineno}: backends {sorted(strings)}")  # type: ignore[attr-defined]
            if _reads_torch_hip(node) and rel != "facts/backends.py":
                found.append(f"{rel}:{node.lineno}: torch.version.hip")  # type: ignore[attr-defined]
    assert not found, "restated (read regress.facts.suite_facts / regress.facts.backends):\n" + "\n".join(
        found
    )


def test_a_nightly_refuses_a_timed_suite_on_a_backend_without_a_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from regress.cli import main

    db = tmp_path / "r.db"
    assert main(["nightly", "--backend", "hip-emu", "--suites", "ulp,perf", "--db", f"sqlite:///{db}"]) == 2
    assert "hip-emu runs determinism and ulp only, not perf" in capsys.readouterr().err
    assert not db.exists()


def test_the_mode_and_layout_lists_are_stated_once_in_results() -> None:
    """Every tuple, list or set of all the modes or all the layouts, and every Literal of them, in the
    package and the benchmarks comes from regress.facts.results."""
    modes, layouts = set(ROUNDING_MODES), set(LAYOUTS)
    found = []
    for rel, tree in _trees():
        if rel == "regress/facts/results.py":
            continue
        for node in ast.walk(tree):
            strings = _strings(node)
            if strings in (modes, layouts):  # the whole list (a chosen few modes is a choice)
                found.append(f"{rel}:{node.lineno}: {sorted(strings)}")  # type: ignore[attr-defined]
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Name)
                and node.value.id == "Literal"
            ):
                args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                if {a.value for a in args if isinstance(a, ast.Constant)} & (modes | layouts):
                    found.append(f"{rel}:{node.lineno}: Literal of modes or layouts")
    assert not found, (
        "restated (import ROUNDING_MODES / LAYOUTS / Rounding / Layout from regress.facts.results):\n"
        + ("\n".join(found))
    )


def test_head_dim_is_stated_once_in_the_abi() -> None:
    """The kernel's one head_dim is the ABI's (kernel/include/regress_attn.h, mirrored once by
    regress.facts.abi.RA_HEAD_DIM): no other module binds a head-dim name to a number."""
    from regress.facts.abi import RA_HEAD_DIM

    header = (ROOT / "kernel" / "include" / "regress_attn.h").read_text()
    assert re.search(r"#define RA_HEAD_DIM (\d+)", header).group(1) == str(RA_HEAD_DIM)  # type: ignore[union-attr]
    found = []
    for rel, tree in _trees():
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            value = getattr(node, "value", None)
            for target in targets:
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
                if (
                    "head_dim" in name.lower()
                    and isinstance(value, ast.Constant)
                    and rel != "regress/facts/abi.py"
                ):
                    found.append(f"{rel}:{node.lineno}: {name} = {value.value!r}")
    assert not found, "restated (import RA_HEAD_DIM from regress.facts.abi):\n" + "\n".join(found)


def test_the_fire_drills_are_one_table() -> None:
    """regress.native.build.DRILLS is the one statement of the drills: `--inject` takes its names, a build
    its keys and macros (each defined in kernel/common/inject.h), the CLI help says what each breaks,
    and no other module of the package or the benchmarks spells a drill macro."""
    from regress.cli.commands.options import inject
    from regress.native.build import DRILLS, INJECT_MACROS, inject_flags
    from regress.run.runner import INJECT_NAMES, parse_inject

    header = (ROOT / "kernel" / "common" / "inject.h").read_text()
    for d in DRILLS:
        assert d.macro in header and INJECT_MACROS[d.key] == d.macro
        assert INJECT_NAMES[d.name] == d.key
        arg = {"PCT": "=10", "N": "=2", "SQ": "=64", "A:B": "=rtne:rtz", "": ""}[d.value]
        assert list(parse_inject([d.name + arg]) or {}) == [d.key]
        assert inject_flags(parse_inject([d.name + arg]))[0].startswith(f"-D{d.macro}=")

    @click.command()
    @inject
    def cmd(inject: tuple[str, ...]) -> None:
        pass

    help_text = next(p for p in cmd.params if p.name == "inject").help or ""
    assert all(d.name in help_text and d.breaks in help_text for d in DRILLS)
    found = [
        f"{rel}:{node.lineno}"
        for rel, tree in _trees()
        if rel != "regress/native/build.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "RA_INJECT_" in node.value
    ]
    assert not found, (
        "a drill macro spelled outside regress.native.build.DRILLS (use build.inject_flags):\n"
        + "\n".join(found)
    )


def test_the_flop_formula_is_stated_once_in_the_catalogue() -> None:
    """regress.facts.cases.Shape.flops is the one FLOP count (4 · H · visible pairs · D): no other module
    multiplies by the literal 4 a product of shape sizes, and the MI300X model's Shape counts with
    it (dense, causal, GQA and varlen alike)."""
    from regress.emu.mi300x import Shape as ModelShape
    from regress.facts import cases

    for text in ("2,24,8192,8192", "2,32,4096,1000,8,causal", "16,4,lens=300/1000/77,causal"):
        shape = ModelShape.parse(text)
        assert shape.flops == shape.catalogue().flops and isinstance(shape.catalogue(), cases.Shape)
    sizes = {"b", "h", "sq", "sk", "d", "s", "heads", "HEAD_DIM"}

    def names(node: ast.AST) -> set[str]:
        out = set()
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                out.add(n.id)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                out.add(n.value)
            elif isinstance(n, ast.Attribute):
                out.add(n.attr)
        return out

    found = []
    for rel, tree in _trees():
        if rel == "regress/facts/cases.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                left = node.left
                while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Mult):
                    left = left.left
                if (
                    isinstance(left, ast.Constant)
                    and left.value in (4, 4.0)
                    and len(names(node) & sizes) >= 3
                ):
                    found.append(f"{rel}:{node.lineno}")
    assert not found, "a FLOP count outside regress.facts.cases.Shape.flops:\n" + "\n".join(
        sorted(set(found))
    )
