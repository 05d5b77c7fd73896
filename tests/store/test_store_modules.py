"""Inside the store, modules import one way (issue 25: bulk.py and repo.py imported each other, a
circle hidden by a lazy import). Every import counts, lazy and TYPE_CHECKING ones included."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

STORE = Path(__file__).resolve().parents[2] / "regress" / "store"


def store_imports(path: Path) -> set[str]:
    """The store modules `path` imports (`from .x import` and `from regress.store.x import`)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1:
            names = [node.module] if node.module else [a.name for a in node.names]
        elif node.level == 0 and (node.module or "").startswith("regress.store."):
            names = [(node.module or "").removeprefix("regress.store.")]
        else:
            continue
        out |= {n.split(".")[0] for n in names if n and (STORE / f"{n.split('.')[0]}.py").is_file()}
    return out - {path.stem}


def graph() -> dict[str, set[str]]:
    return {p.stem: store_imports(p) for p in sorted(STORE.glob("*.py")) if p.stem != "__init__"}


def test_store_modules_import_no_circle() -> None:
    try:
        tuple(TopologicalSorter(graph()).static_order())
    except CycleError as exc:
        raise AssertionError(f"store modules import in a circle: {' -> '.join(exc.args[1])}") from None


def test_the_layers_of_the_store() -> None:
    g = graph()
    assert "repo" not in g["bulk"] and "transfer" not in g["bulk"]  # bulk writes rows, knows no bundle
    assert "transfer" not in g["repo"]  # one-at-a-time writes know no bundle either
    assert "transfer" not in g["queries"] and "repo" not in g["queries"]


def test_a_circle_is_seen(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def f():\n    from .b import g\n")
    b.write_text("from .a import f\n")
    global STORE
    saved, STORE = STORE, tmp_path
    try:
        assert store_imports(a) == {"b"} and store_imports(b) == {"a"}
        try:
            test_store_modules_import_no_circle()
        except AssertionError as exc:
            assert "circle" in str(exc)
        else:
            raise AssertionError("the circle a <-> b was not seen")
    finally:
        STORE = saved
