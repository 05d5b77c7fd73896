"""Where the files that travel with the package live: kernel sources, Alembic migrations, the site's
templates and assets, and the shipped stack pins.

A checkout (plain or editable install) uses its own tree, so an edit to `kernel/` is what the next
build compiles. A wheel carries copies of the same folders under `regress/_share/` (setup.py's
`build_py` step puts them there), so `pip install regress-*.whl` works from any directory.
Writable state (the build cache, user pins) never goes into the installed package.
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # regress/, this file being regress/facts/resources.py
CHECKOUT = _PACKAGE.parent
SHARE = _PACKAGE / "_share"
# The folders (relative to the source root) that a wheel must carry; setup.py reads this list.
SHARED_TREES = ("kernel", "migrations", "web", "runners/stacks")
SHARED_FILES = ("alembic.ini",)
_MARKER = Path("kernel") / "include" / "regress_attn.h"

CACHE_ENV = "REGRESS_CACHE_DIR"
WEB_ENV = "REGRESS_WEB_DIR"  # another web/ folder (a fork's theme, a packaged copy)


def in_checkout() -> bool:
    """True when the package runs from a source tree (plain checkout or editable install)."""
    return (CHECKOUT / _MARKER).is_file()


def source_root() -> Path:
    """The folder holding kernel/, migrations/, web/ and runners/stacks/."""
    return CHECKOUT if in_checkout() else SHARE


def kernel_dir() -> Path:
    return source_root() / "kernel"


def migrations_dir() -> Path:
    return source_root() / "migrations"


def web_dir() -> Path:
    """The templates and static assets of the site and the gate reports: $REGRESS_WEB_DIR, else the
    web/ of the checkout or the wheel."""
    candidates = []
    if os.environ.get(WEB_ENV):
        candidates.append(Path(os.environ[WEB_ENV]))
    candidates.append(source_root() / "web")
    for path in candidates:
        if (path / "templates").is_dir() and (path / "static").is_dir():
            return path
    from .errors import UserError  # here: setup.py runs this file alone (runpy), outside the package

    tried = ", ".join(str(p) for p in candidates)
    raise UserError(f"site templates not found (tried {tried}); set ${WEB_ENV} to a web/ folder")


def shipped_stacks_dir() -> Path:
    """The pins that come with regress (read-only in a wheel)."""
    return source_root() / "runners" / "stacks"


def mi300x_predicted_dir() -> Path:
    """The committed predicted MI300X times (benchmarks/mi300x/mi300x_model.py --out NAME.jsonl), shown
    by the site: package data, so a checkout and a wheel read the same folder."""
    return _PACKAGE / "facts" / "data" / "mi300x"


def cache_dir() -> Path:
    """Build cache: $REGRESS_CACHE_DIR, else the checkout's .regress/build, else the user cache."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    if in_checkout():
        return CHECKOUT / ".regress" / "build"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "regress" / "build"
