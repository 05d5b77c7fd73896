"""Bundles from files into the store (`regress import`), one transaction per bundle."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..bundle import BundleError, read_bundle
from .repo import BundleConflict, Store, import_bundle


@dataclass(frozen=True)
class ImportOutcome:
    path: Path
    state: str  # "stored" | "already stored" | "refused"
    run_id: str | None = None
    results: int = 0
    reason: str = ""

    def line(self) -> str:
        if self.state == "refused":
            return f"refused {self.path}: {self.reason}"
        return f"{self.state} {self.run_id} ({self.results} results) from {self.path}"


def import_files(store: Store, paths: Iterable[Path]) -> list[ImportOutcome]:
    """Validates and stores each bundle; a refused one leaves the database as it was."""
    outcomes = []
    for path in paths:
        try:
            bundle = read_bundle(path)
            with store.transaction() as session:
                run_id, created = import_bundle(session, bundle, validated=True)
        except (BundleError, BundleConflict) as exc:
            outcomes.append(ImportOutcome(path, "refused", reason=str(exc).removeprefix(f"{path}: ")))
            continue
        state = "stored" if created else "already stored"
        outcomes.append(ImportOutcome(path, state, run_id, len(bundle["results"])))
    return outcomes
