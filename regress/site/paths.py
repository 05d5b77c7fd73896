"""Where the templates and static assets live (web/ of the checkout or of the wheel, DESIGN §1)."""

from __future__ import annotations

import os
from pathlib import Path

from .. import resources
from ..errors import UserError

WEB_ENV = "REGRESS_WEB_DIR"  # another web/ folder (a fork's theme, a packaged copy)


def web_dir() -> Path:
    """$REGRESS_WEB_DIR, else the web/ that regress.resources finds (checkout or installed wheel)."""
    candidates = []
    if os.environ.get(WEB_ENV):
        candidates.append(Path(os.environ[WEB_ENV]))
    candidates.append(resources.web_dir())
    for path in candidates:
        if (path / "templates").is_dir() and (path / "static").is_dir():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise UserError(f"site templates not found (tried {tried}); set ${WEB_ENV} to a web/ folder")
