"""Where the templates and static assets live (web/ beside the package, DESIGN §1)."""

from __future__ import annotations

import os
from pathlib import Path

import regress

from ..errors import UserError

WEB_ENV = "REGRESS_WEB_DIR"  # another web/ folder (a fork's theme, a packaged copy)


def web_dir() -> Path:
    """web/ of the checkout: found through the package's own path, so a plain checkout, an editable
    install and $REGRESS_WEB_DIR all work; a wheel without web/ gets one clear error."""
    candidates = []
    if os.environ.get(WEB_ENV):
        candidates.append(Path(os.environ[WEB_ENV]))
    candidates.append(Path(regress.__file__).resolve().parents[1] / "web")
    for path in candidates:
        if (path / "templates").is_dir() and (path / "static").is_dir():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise UserError(f"site templates not found (tried {tried}); set ${WEB_ENV} to a web/ folder")
