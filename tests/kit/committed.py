"""The committed results, read in one place: the one module of the tests (and of the drills that
borrow it) that knows where they lie and how the campaigns are packed.

- `benchmarks/headline/*.json`: the run bundles README and the docs quote, plain files.
- `benchmarks/campaigns/NAME.tar.xz`: the raw output of a campaign's device calls, one archive
  each, cited as `NAME.tar.xz:MEMBER` (benchmarks/campaigns/INDEX.md lists them).
- the MI300X model's predictions the site shows stay where the gfx942 branch keeps them; the
  package reads them through `regress.facts.resources.mi300x_predicted_dir`, and so do tests.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import tarfile
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HEADLINE = BENCHMARKS / "headline"
CAMPAIGNS = BENCHMARKS / "campaigns"


def headline(pattern: str = "*.json") -> list[Path]:
    """The headline bundles (plain files), by name."""
    return sorted(HEADLINE.glob(pattern))


def headline_bundle(pattern: str) -> Path:
    """The one headline bundle whose name matches `pattern` (say, "h200-nightly-*")."""
    found = headline(pattern if pattern.endswith(".json") else pattern + ".json")
    if len(found) != 1:
        raise LookupError(f"{len(found)} headline bundles match {pattern!r} in {HEADLINE}")
    return found[0]


# One headline bundle of each kind, 1.5 MB of the 19: a one-GPU nightly with every suite and a
# declared drift, a one-GPU sharded quick run and a two-GPU sharded quick run. Plain pytest reads
# these where a test would otherwise read every headline bundle; CI's full tier reads them all.
SAMPLE = (
    "h200-nightly-01a227263a5bf313a6c4ef19",
    "h200-shard-gpus0-01a2272c9436d8afa02fc37d",
    "h200x2-sharded-quick-01a2276db2e71d034780a8bf",
)


def headline_sample() -> list[Path]:
    """The SAMPLE headline bundles, by name."""
    return [headline_bundle(name) for name in sorted(SAMPLE)]


def campaigns() -> list[Path]:
    return sorted(CAMPAIGNS.glob("*.tar.xz"))


@functools.cache
def _members(archive: str, folder: Path = CAMPAIGNS) -> dict[str, bytes]:
    """Every file of one campaign archive, by member name (each archive is read once a process)."""
    path = folder / archive
    if not path.is_file():
        raise LookupError(f"no campaign archive {path}")
    with tarfile.open(path) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def members(archive: str, pattern: str = "*") -> list[str]:
    """The member names of `archive` ("h200-issue26.tar.xz") matching `pattern`, sorted."""
    return sorted(n for n in _members(archive) if fnmatch.fnmatchcase(n, pattern))


def files(archive: Path) -> dict[str, bytes]:
    """Every file of the archive at `archive` (a campaign's, or a copy elsewhere), by member name."""
    return dict(_members(archive.name, archive.parent))


def read(citation: str) -> bytes:
    """One committed file by the name the docs cite: "h200-issue26.tar.xz:call37/trace.json" (a
    campaign member) or "headline/NAME.json"."""
    if ":" in citation:
        archive, member = citation.split(":", 1)
        files = _members(archive)
        if member not in files:
            raise LookupError(f"{archive} has no member {member!r}")
        return files[member]
    return (BENCHMARKS / citation).read_bytes()


def read_json(citation: str) -> Any:
    return json.loads(read(citation))


def is_bundle(doc: Any) -> bool:
    return isinstance(doc, dict) and {"schema_version", "run", "stack", "results"} <= set(doc)


def committed_bundles() -> list[tuple[str, bytes]]:
    """(name, bytes) of every committed run bundle: the headline files, then each campaign's
    bundles ("campaigns/ARCHIVE.tar.xz/MEMBER"), by name."""
    found = [(p.relative_to(BENCHMARKS).as_posix(), p.read_bytes()) for p in headline()]
    for archive in campaigns():
        for name, data in sorted(_members(archive.name).items()):
            if name.endswith(".json"):
                try:
                    doc = json.loads(data)
                except ValueError:
                    continue
                if is_bundle(doc):
                    found.append((f"{archive.relative_to(BENCHMARKS).as_posix()}/{name}", data))
    return found


def extract(citation: str, folder: Path) -> Path:
    """One committed file written under `folder` (for a harness that takes a path), its path."""
    path = folder / citation.replace(":", "/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(read(citation))
    return path
