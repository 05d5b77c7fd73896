"""The folder table of docs/architecture.md, enforced (issues 25 and 43), as the store-door test
enforces the store.

`regress/` is one folder a layer (`facts/`, `detect/`, `store/`, `native/`, `emu/`, `kernel/`, ...),
and each folder is a room. The table says, for each room, which other rooms it may import; every
room may import itself and the package's `__init__` (for `__version__`). Two more rooms stand
outside the package: `benchmarks/` (the workshop) and `tests/`; the package imports neither (a wheel
carries neither), and their rows say what they may import. This test reads the table from the doc,
walks every import of every module of `regress/`, `benchmarks/` and `tests/` (the syntax tree, so
lazy imports inside functions and TYPE_CHECKING imports count too: a lazy import hides a circle, it
does not remove it), and fails on an import the table does not allow, on a room missing from the
table (or a table row naming no room), and on a table that itself allows a circle.
"""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "regress"
DOC = ROOT / "docs" / "architecture.md"
OUTSIDE = ("tests/kit", "benchmarks", "tests")  # rooms outside the package, the deeper first
BASE = {"__init__", "__version__"}  # from regress import __version__
ANY = "*"  # "anything": every room of the package (not benchmarks/ or tests/, which are named)
# The bottom two rooms are pure: at import time they load no I/O library (torch, a database, the
# web, a subprocess); a function may still import one where it needs it (facts/abi's tensor checks).
PURE = ("facts", "detect")
IMPURE = {
    "torch",
    "sqlalchemy",
    "psycopg",
    "flask",
    "werkzeug",
    "waitress",
    "requests",
    "click",
    "jinja2",
    "rich",
    "subprocess",
    "socket",
    "sqlite3",
}

# room -> room imports that break the table today (none; a new break is fixed, not listed).
KNOWN: set[tuple[str, str]] = set()


def room(module: str) -> str:
    """'regress.store.repo' -> 'store'; 'regress' -> '__init__'; 'benchmarks.h200.common' ->
    'benchmarks'; 'tests.kit.cdp' -> 'tests/kit'."""
    parts = module.split(".")
    for where in OUTSIDE:
        if parts[: where.count("/") + 1] == where.split("/"):
            return where
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _local_modules(where: str, root: Path = ROOT) -> frozenset[str]:
    """The names a script imports the scripts of `where` by (benchmarks/ and tests/ put their own
    folders on sys.path, pytest's `pythonpath` puts tests/kit there: `import drillkit`,
    `from real_bundles import ...`); a deeper room's scripts are its own."""
    deeper = [root / w for w in OUTSIDE if w.startswith(where + "/")]
    found = {p.stem for p in (root / where).rglob("*.py") if not any(p.is_relative_to(d) for d in deeper)}
    return frozenset(found - {"__init__", "conftest"})


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """One parse a file a test process (the walks below read every file of three trees)."""
    return ast.parse(path.read_text(), str(path))


def imported(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) of every import in `path` of the package or of a script of benchmarks/ or
    tests/, relative ones resolved; a script's sibling is named `benchmarks.NAME` or `tests.NAME`."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    siblings = {where: _local_modules(where, root) for where in OUTSIDE if (root / where).is_dir()}
    out: list[tuple[int, str]] = []
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            if node.module is None or module == "regress":  # from . import x / from regress import x
                out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, module))
    found = []
    for line, m in out:
        top = m.split(".")[0]
        if top == "regress" or top in OUTSIDE:
            found.append((line, m))
        else:
            found += [
                (line, f"{where.replace('/', '.')}.{m}") for where, names in siblings.items() if top in names
            ][:1]
    return found


def layer_table(text: str) -> dict[str, set[str]]:
    """The table between the `<!-- layers -->` markers: room -> the rooms it may import."""
    body = text.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    table: dict[str, set[str]] = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        allowed = set(re.findall(r"`([\w/]+)`", cells[1]))
        if cells[1].startswith("anything"):
            allowed.add(ANY)
        for name in re.findall(r"`([\w/.]+)`", cells[0]):
            table[name.removesuffix("/").removesuffix(".py")] = {a.removesuffix("/") for a in allowed}
    return table


def rooms() -> set[str]:
    """The package's folders (and its top-level modules but `__init__`)."""
    found = {p.stem for p in PACKAGE.glob("*.py")} | {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    return found - {"__init__"}


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py")) + [
        p for where in OUTSIDE for p in sorted((ROOT / where).rglob("*.py"))
    ]


def edges() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for path in sources():
        here = room(module_name(path))
        for line, module in imported(path):
            there = room(module)
            if there != here:
                out.setdefault((here, there), []).append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return out


def allows(table: dict[str, set[str]], a: str, b: str) -> bool:
    mine = table.get(a, set())
    return b in BASE or b in mine or (ANY in mine and b not in OUTSIDE)


def breaks(table: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    return {(a, b): where for (a, b), where in edges().items() if not allows(table, a, b)}


def test_every_room_is_in_the_layer_table() -> None:
    table = layer_table(DOC.read_text())
    missing = (rooms() | set(OUTSIDE)) - set(table)
    assert not missing, f"add {sorted(missing)} to the folder table in docs/architecture.md"
    assert not set(table) - rooms() - set(OUTSIDE), "the folder table names rooms that do not exist"
    named = {r for allowed in table.values() for r in allowed} - {ANY}
    assert not named - rooms() - set(OUTSIDE) - BASE, "the folder table allows rooms that do not exist"


# emu/ states its rule in docs/hip-gfx942.md and its __init__ docstring; it belongs to the gfx942
# kernel branch, still mid-change when the folders moved, which adds its README when it lands.
NO_README_YET = {"emu"}


def test_every_folder_with_a_row_says_its_rule() -> None:
    """A folder of the table carries a README that states its rule (STYLE: folders with a rule)."""
    table = layer_table(DOC.read_text())
    folders = {r: PACKAGE / r for r in table if (PACKAGE / r).is_dir()}
    folders |= {"tests/kit": ROOT / "tests" / "kit", "benchmarks": ROOT / "benchmarks"}
    silent = sorted(r for r, path in folders.items() if not (path / "README.md").is_file())
    assert silent == sorted(NO_README_YET), f"no README.md stating the rule in {silent}"


def test_the_layer_table_allows_no_circle() -> None:
    table = layer_table(DOC.read_text())

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in table.get(start, set()) - {ANY} - BASE:
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    assert [r for r in table if ANY not in table[r] and reaches(r, r, set())] == []


def test_imports_follow_the_layer_table() -> None:
    found = breaks(layer_table(DOC.read_text()))
    new = {k: v for k, v in found.items() if k not in KNOWN}
    assert not new, "imports the folder table (docs/architecture.md) does not allow:\n" + "\n".join(
        w for where in new.values() for w in where
    )
    assert not KNOWN - set(found), f"fixed, remove from KNOWN: {sorted(KNOWN - set(found))}"


@pytest.mark.parametrize("where", PURE)
def test_the_pure_rooms_load_no_io_library(where: str) -> None:
    loaded = [
        f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
        for path in sorted((PACKAGE / where).rglob("*.py"))
        for node in _parsed(path).body  # module level only: what an import of it loads
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        if name.split(".")[0] in IMPURE
    ]
    assert loaded == []


def test_the_table_checks_outside_rooms(tmp_path: Path) -> None:
    """A script's sibling import is seen, and the package may import no outside room."""
    (tmp_path / "benchmarks" / "service").mkdir(parents=True)
    (tmp_path / "tests" / "kit").mkdir(parents=True)
    (tmp_path / "benchmarks" / "service" / "drillkit.py").write_text("")
    (tmp_path / "tests" / "kit" / "real_bundles.py").write_text("")
    (tmp_path / "tests" / "emu_asm.py").write_text("")
    (tmp_path / "tests" / "test_x.py").write_text(
        "import drillkit\nfrom real_bundles import x\nimport emu_asm\n"
    )
    got = {m for _, m in imported(tmp_path / "tests" / "test_x.py", tmp_path)}
    assert got == {"benchmarks.drillkit", "tests.kit.real_bundles", "tests.emu_asm"}
    assert {room(m) for m in got} == {"benchmarks", "tests/kit", "tests"}
    table = layer_table(DOC.read_text())
    assert not any(allows(table, "store", w) for w in OUTSIDE)
    assert not allows(table, "benchmarks", "tests") and not allows(table, "tests/kit", "tests")
    assert allows(table, "tests", "benchmarks") and allows(table, "benchmarks", "tests/kit")
    assert allows(table, "cli", "store") and not allows(table, "cli", "benchmarks")


def test_the_walk_sees_relative_lazy_and_aliased_imports(tmp_path: Path) -> None:
    """The walker itself: a break written each way is seen (else the test above could never fail)."""
    pkg = tmp_path / "regress" / "present" / "site"
    pkg.mkdir(parents=True)
    (pkg / "model.py").write_text(
        "from ...machine.stack import HASHED_KEYS\n"
        "import regress.kernel as k\n"
        "from . import data\n"
        "def f():\n    from ... import run\n    from regress.kernel import op\n"
    )
    got = {m for _, m in imported(pkg / "model.py", tmp_path)}
    assert got == {"regress.machine.stack", "regress.kernel", "regress.present.site.data", "regress.run"}
    assert {room(m) for m in got} == {"machine", "kernel", "present", "run"}


def declared_dependencies() -> set[str]:
    """The import names of pyproject's required dependencies ("tomli-w>=1.0" -> "tomli_w")."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("-", "_") for d in deps}


def _required(node: ast.AST, required: set[str]) -> bool:
    """A first-party import, or one of a declared dependency."""
    names = required | {"regress"}
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] in names
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] in names for a in node.names)


def guarded_imports(source: str, required: set[str]) -> list[int]:
    """Lines of first-party or required imports inside a `try` that catches ImportError."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Try):
            continue
        caught = {
            n.id
            for h in node.handlers
            if h.type is not None
            for n in ast.walk(h.type)
            if isinstance(n, ast.Name)
        }
        if caught & {"ImportError", "ModuleNotFoundError"}:
            lines += [sub.lineno for stmt in node.body for sub in ast.walk(stmt) if _required(sub, required)]
    return lines


def test_the_guard_check_sees_a_guard() -> None:
    required = declared_dependencies()
    assert {"torch", "scipy", "sqlalchemy", "tomli_w"} <= required
    guard = "try:\n    from .analysis import analyse_run\nexcept (ImportError, OSError):\n    pass\n"
    assert guarded_imports(guard, required) == [2]
    assert guarded_imports(guard.replace(".analysis", "torch"), required) == [2]  # a dependency
    assert guarded_imports(guard.replace(".analysis", "asv"), required) == []  # optional: allowed


def test_no_first_party_import_is_guarded() -> None:
    """A `try: from .x import y / except ImportError` turns a broken module (a scipy that fails to
    load) into silently missing behaviour (no regressions stored, no change points drawn); the same
    for a declared dependency (a torch that fails to import must not read as "no GPU, use the cpu").
    Only imports that are optional by declaration may be guarded."""
    required = declared_dependencies()
    guarded = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in guarded_imports(path.read_text(), required)
    ]
    assert guarded == []


# Module circles allowed to stand (a circle found must lie inside one of them). The last,
# emu/isa ↔ machine ↔ hazards (isa's TYPE_CHECKING import of machine.Wave), went when isa declared
# the `Wave` protocol its instructions need.
KNOWN_CIRCLES: list[set[str]] = []  # none left; a new circle is broken, not listed


def module_graph(package: Path = PACKAGE, root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the first-party modules it imports (lazy and TYPE_CHECKING ones too); `from p import
    m` counts as an import of the module p.m where m is one, else of p."""
    paths = {module_name(p, root): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(_parsed(path)):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(pkg[: len(pkg) - node.level + 1]) if node.level else ""
                module = ".".join(p for p in (base, node.module or "") if p)
                for a in node.names:
                    sub = f"{module}.{a.name}"
                    targets.add(sub if sub in paths else module)
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected sets of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = {stack.pop()}
            while v not in part:
                part.add(stack.pop())
            if len(part) > 1:
                found.append(part)

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_circle_walk_sees_a_type_checking_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "regress" / "judge" / "gate"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text("from .render import write\n")
    (pkg / "render.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from . import core\n")
    found = circles(module_graph(tmp_path / "regress", tmp_path))
    assert found == [{"regress.judge.gate.core", "regress.judge.gate.render"}]


def test_no_new_module_circle() -> None:
    """No two modules import each other, even lazily (issue 25: gate/core ↔ gate/render went when the
    report types moved to gate/report.py)."""
    new = [sorted(c) for c in circles(module_graph()) if not any(c <= known for known in KNOWN_CIRCLES)]
    assert new == [], f"import circles: {new}"


def floors() -> dict[str, int]:
    """Room -> its floor over the imports that stand today (1: imports no other room)."""
    out: dict[tuple[str, str], list[str]] = edges()
    below: dict[str, set[str]] = {r: set() for r in rooms()}
    for here, there in out:
        if here in below and there in below:
            below[here].add(there)
    found: dict[str, int] = {}

    def floor(r: str) -> int:
        if r not in found:
            found[r] = 1 + max((floor(x) for x in below[r]), default=0)
        return found[r]

    for r in below:
        floor(r)
    return found


if __name__ == "__main__":  # python3 tests/test_import_layers.py: the package's rooms floor by floor
    modules: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        modules[room(module_name(path))] = modules.get(room(module_name(path)), 0) + 1
    by_floor = floors()
    pairs = {(a, b) for a, b in edges() if a in by_floor and b in by_floor}
    print(f"{len(by_floor)} rooms on {max(by_floor.values())} floors, {len(pairs)} room-to-room imports")
    for level in sorted(set(by_floor.values()), reverse=True):
        here = sorted(r for r in by_floor if by_floor[r] == level)
        print(f"floor {level}: " + ", ".join(f"{r} ({modules.get(r, 0)} modules)" for r in here))


# Who may name the committed results' folders: the tests' one reader of the headline bundles and
# campaign archives (the MI300X predictions the site shows are package data, not results).
RESULTS_READERS = {"tests/kit/committed.py"}
RESULT_FOLDERS = ("results", "headline", "campaigns")


def joins_results(tree: ast.AST) -> bool:
    """Whether the code joins a path onto a results folder: `ROOT / "benchmarks" / "results"` or
    `ROOT / "benchmarks/headline/x.json"` (a string that only names a folder, in a docstring or a
    message, is not a reader)."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
            continue
        right = node.right.value if isinstance(node.right, ast.Constant) else None
        left = node.left.right if isinstance(node.left, ast.BinOp) else node.left
        left_s = left.value if isinstance(left, ast.Constant) else None
        if not isinstance(right, str):
            continue
        if re.match(rf"benchmarks/({'|'.join(RESULT_FOLDERS)})\b", right) or (
            left_s == "benchmarks" and right.split("/")[0] in RESULT_FOLDERS
        ):
            return True
    return False


def test_the_committed_results_are_read_in_one_place() -> None:
    readers = [
        str(path.relative_to(ROOT))
        for path in sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
        if joins_results(_parsed(path))
    ]
    assert set(readers) <= RESULTS_READERS, f"read them through tests/kit/committed.py: {readers}"
    assert joins_results(ast.parse('p = ROOT / "benchmarks" / "results" / "x.json"'))
    assert joins_results(ast.parse('p = Path(__file__).parents[2] / "benchmarks/headline/x.json"'))
    assert not joins_results(ast.parse('"""ROOT / benchmarks/results/x.json"""\nx = "benchmarks/results"'))
