"""The predicted MI300X table the site shows on the gfx942-emu stack page: the committed output of
benchmarks/mi300x/mi300x_model.py (regress.emu.timing's CDNA3 model). These are *predictions*, kept apart
from every measured time: they never enter the store, the result table or a gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from regress.facts import resources

# Stacks whose page shows the table: the emulated gfx942 code object.
BACKEND = "hip-emu"


def latest_file(folder: Path | None = None) -> Path | None:
    """The newest predicted-*.jsonl (names carry the date, so the last by name)."""
    folder = folder or resources.mi300x_predicted_dir()
    files = sorted(folder.glob("predicted-*.jsonl")) if folder.is_dir() else []
    return files[-1] if files else None


def load(path: Path | None) -> dict[str, Any] | None:
    """{"file", "rows": [...], "summary"}; rows ordered by shape, mode, kernel. None when absent."""
    if path is None:
        return None
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if r.get("summary"):
            summary = r
        elif "predicted_ms" in r:  # not the rows a kernel refused ("error") or the steady states
            rows.append(r)
    return {"file": path.name, "rows": rows, "summary": summary}
