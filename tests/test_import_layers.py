"""The layer table of docs/architecture.md, enforced (issue 25), as the store-door test enforces the store.

The table says, for each room of the package (a top-level module such as `kernel.py`, or a
subpackage such as `store/`), which other rooms it may import; every room may import the base rooms
(`errors`, `results`, `resources`, `escape` and the package itself, for `__version__`) and itself. This test
reads the table from the doc, walks every import of every module of `regress/` (the syntax tree, so
lazy imports inside functions and TYPE_CHECKING imports count too: a lazy import hides a circle, it
does not remove it), and fails on an import the table does not allow, on a room missing from the
table, and on a table that itself allows a circle.

`KNOWN` lists the breaks that stood when the test was written, each to be removed by issue 25; an
import in it that no longer exists fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "regress"
DOC = ROOT / "docs" / "architecture.md"
BASE = {
    "errors",
    "results",
    "resources",
    "escape",
    "backends",
    "suite_facts",
    "__init__",
    "__version__",
}  # __version__: from regress import it
ANY = "*"

# room -> room imports that break the table today (issue 25 untangles each).
KNOWN: set[tuple[str, str]] = set()  # none left; a new break is fixed, not listed


def room(module: str) -> str:
    """'regress.store.repo' -> 'store'; 'regress' -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) of every first-party import in `path`, relative ones resolved."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            if node.module is None or module == "regress":  # from . import x / from regress import x
                out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, module))
    return [(line, m) for line, m in out if m.split(".")[0] == "regress"]


def layer_table(text: str) -> dict[str, set[str]]:
    """The table between the `<!-- layers -->` markers: room -> the rooms it may import."""
    body = text.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    table: dict[str, set[str]] = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        allowed = {ANY} if cells[1] == "anything" else set(re.findall(r"`([\w/]+)`", cells[1]))
        for name in re.findall(r"`([\w/.]+)`", cells[0]):
            table[name.removesuffix("/").removesuffix(".py")] = {a.removesuffix("/") for a in allowed}
    return table


def rooms() -> set[str]:
    found = {p.stem for p in PACKAGE.glob("*.py")} | {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    return found - {"__init__"}


def edges() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        here = room(module_name(path))
        for line, module in imported(path):
            there = room(module)
            if there != here:
                out.setdefault((here, there), []).append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return out


def breaks(table: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    return {
        (a, b): where
        for (a, b), where in edges().items()
        if b not in BASE and ANY not in table.get(a, set()) and b not in table.get(a, set())
    }


def test_every_room_is_in_the_layer_table() -> None:
    table = layer_table(DOC.read_text())
    missing = rooms() - set(table)
    assert not missing, f"add {sorted(missing)} to the layer table in docs/architecture.md"
    assert not set(table) - rooms() - BASE, "the layer table names rooms that do not exist"


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
    assert not new, "imports the layer table (docs/architecture.md) does not allow:\n" + "\n".join(
        w for where in new.values() for w in where
    )
    assert not KNOWN - set(found), f"fixed, remove from KNOWN: {sorted(KNOWN - set(found))}"


def test_the_walk_sees_relative_lazy_and_aliased_imports(tmp_path: Path) -> None:
    """The walker itself: a break written each way is seen (else the test above could never fail)."""
    pkg = tmp_path / "regress" / "site"
    pkg.mkdir(parents=True)
    (pkg / "model.py").write_text(
        "from ..stack import HASHED_KEYS\n"
        "import regress.kernel as k\n"
        "from . import data\n"
        "def f():\n    from .. import nightly\n    from regress import op\n"
    )
    got = {m for _, m in imported(pkg / "model.py", tmp_path)}
    assert got == {"regress.stack", "regress.kernel", "regress.site.data", "regress.nightly", "regress.op"}


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
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
    pkg = tmp_path / "regress" / "gate"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text("from .render import write\n")
    (pkg / "render.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from . import core\n")
    found = circles(module_graph(tmp_path / "regress", tmp_path))
    assert found == [{"regress.gate.core", "regress.gate.render"}]


def test_no_new_module_circle() -> None:
    """No two modules import each other, even lazily (issue 25: gate/core ↔ gate/render went when the
    report types moved to gate/report.py)."""
    new = [sorted(c) for c in circles(module_graph()) if not any(c <= known for known in KNOWN_CIRCLES)]
    assert new == [], f"import circles: {new}"
