"""Writes benchmarks/campaigns/INDEX.md: each campaign archive, what call made it, when, at which
commit, what it holds and which docs cite it, from calls.toml (the commits and what they measured),
the archives themselves (read through tests/kit/committed.py) and README.md + docs/.

    python3 benchmarks/campaigns/campaign_index.py          # rewrite INDEX.md
    python3 benchmarks/campaigns/campaign_index.py --check  # exit 1 naming what is stale or missing

tests/test_campaign_index.py runs the check: an archive, or an archive's `callN/` folder, without an
entry in calls.toml fails it, and so does an entry without an archive or a doc citing a member that
is not there.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kit"))
import committed  # noqa: E402

HERE = Path(__file__).resolve().parent
CALLS = HERE / "calls.toml"
INDEX = HERE / "INDEX.md"
CALL_FOLDER = re.compile(r"call\d+/")
# a citation in a doc: `campaigns/NAME.tar.xz` or `NAME.tar.xz:MEMBER` (a member may end in a brace
# pattern, `call{1,2,3}/`: the part before the brace must name members)
CITED = re.compile(r"([a-z0-9][a-z0-9x-]*)\.tar\.xz(?::([^\s`'\")\],{]*))?")

HEAD = """\
# Campaigns: the raw output of the device calls

<!-- Written by benchmarks/campaigns/campaign_index.py from calls.toml, the archives and the
docs; edit calls.toml and run `python3 benchmarks/campaigns/campaign_index.py`
(tests/test_campaign_index.py checks it). -->

One `.tar.xz` a campaign. A campaign is a series of device calls made for one issue or question
(issue 26's 37 calls on the H200, the split-KV calls, a gate calibration); a call's folder is a
member folder of its campaign's archive (`callN/`), and a one-call campaign keeps its files at the
archive's top. Docs cite a file as `benchmarks/campaigns/NAME.tar.xz:MEMBER` (say
`h200-issue26.tar.xz:call37/trace.json`); the bundles README and the docs quote by their numbers
are plain files in `benchmarks/headline/`, not here.

- Read one file: `tar -xJOf benchmarks/campaigns/h200-issue26.tar.xz call37/trace.txt`; list one:
  `tar -tJf benchmarks/campaigns/h200-issue26.tar.xz`. Tests read them only through
  `tests/kit/committed.py` (`read("h200-issue26.tar.xz:call37/trace.json")`), the one reader that
  knows this layout.
- Add a call: unpack the archive, add the folder `callN/` (the device tool's `$OUT`), pack again with
  sorted names, owner 0, mtime 2026-12-01 (`tar --sort=name --owner=0 --group=0 --numeric-owner
  --mtime=2026-12-01 -cf - -C DIR . | xz -9e > NAME.tar.xz`), add its row to `calls.toml` and run
  this folder's `campaign_index.py`. A new campaign is a new archive and a new table in `calls.toml`.

"commit" is the commit that added the call's output (`git show HASH` has the figures and the doc
sections they went to; "what" is its subject, cut); "holds" counts the files and the run bundles
among them; "cited in" lists the docs (README.md, docs/) that name the archive or the member.
"""


@dataclass(frozen=True)
class Entry:
    commit: str
    date: str
    what: str


def load_calls(path: Path = CALLS) -> dict[str, tuple[Entry | None, dict[str, Entry]]]:
    """calls.toml by archive stem: the archive's own entry (or None) and its call rows by member."""
    out: dict[str, tuple[Entry | None, dict[str, Entry]]] = {}
    for stem, table in tomllib.loads(path.read_text()).items():
        own = Entry(table["commit"], table["date"], table["what"]) if "commit" in table else None
        calls = {c["member"]: Entry(c["commit"], c["date"], c["what"]) for c in table.get("call", [])}
        out[stem] = (own, calls)
    return out


def docs(root: Path = ROOT) -> dict[str, str]:
    """README.md and every doc under docs/, by the name INDEX.md shows."""
    found = {"README": (root / "README.md").read_text()}
    found |= {
        p.relative_to(root / "docs").as_posix(): p.read_text() for p in sorted((root / "docs").rglob("*.md"))
    }
    return found


def citations(texts: dict[str, str]) -> list[tuple[str, str, str]]:
    """(doc, archive stem, member or "") for every archive a doc names."""
    return [(doc, m.group(1), m.group(2) or "") for doc, text in texts.items() for m in CITED.finditer(text)]


@dataclass(frozen=True)
class Holds:
    files: int
    bundles: int
    unpacked: int

    def text(self) -> str:
        return f"{self.files} files, {self.bundles} run bundles"


def holds(names: dict[str, bytes]) -> Holds:
    bundles = 0
    for name, data in names.items():
        if name.endswith(".json"):
            with contextlib.suppress(ValueError):  # a .json that is not JSON (a log) is no bundle
                bundles += committed.is_bundle(json.loads(data))
    return Holds(len(names), bundles, sum(len(d) for d in names.values()))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _cited(docs_citing: set[str]) -> str:
    return ", ".join(sorted(docs_citing)) or "—"


def problems(folder: Path = committed.CAMPAIGNS, calls_path: Path = CALLS, root: Path = ROOT) -> list[str]:
    """What keeps INDEX.md from listing every archive: one line each."""
    calls = load_calls(calls_path)
    archives = {p.name.removesuffix(".tar.xz"): p for p in sorted(folder.glob("*.tar.xz"))}
    out = [f"{stem}.tar.xz has no table in {calls_path.name}" for stem in archives if stem not in calls]
    out += [
        f"{calls_path.name} names {stem}, but there is no {stem}.tar.xz"
        for stem in calls
        if stem not in archives
    ]
    for stem in sorted(set(archives) & set(calls)):
        own, rows = calls[stem]
        names = committed.files(archives[stem])
        folders = sorted({n.split("/", 1)[0] + "/" for n in names if CALL_FOLDER.match(n)})
        if own is None and not rows:
            out.append(f"{stem}: neither a commit of its own nor call rows in {calls_path.name}")
        out += [f"{stem}.tar.xz:{f} has no row in {calls_path.name}" for f in folders if f not in rows]
        out += [f"{calls_path.name}: {stem} lists {m}, not in the archive" for m in rows if m not in folders]
    for doc, stem, member in citations(docs(root)):
        if stem not in archives:
            continue  # some other archive (a wheel's, a download's), not a campaign
        if member and not any(n.startswith(member) for n in committed.files(archives[stem])):
            out.append(f"{doc} cites {stem}.tar.xz:{member}, which the archive does not hold")
    return out


def render(folder: Path = committed.CAMPAIGNS, calls_path: Path = CALLS, root: Path = ROOT) -> str:
    calls = load_calls(calls_path)
    cited = citations(docs(root))
    parts = [HEAD]
    for path in sorted(folder.glob("*.tar.xz")):
        stem = path.name.removesuffix(".tar.xz")
        own, rows = calls[stem]
        files = committed.files(path)
        held = holds(files)
        packed = path.stat().st_size
        sizes = f"{held.unpacked / 1e6:.1f} MB packed into {packed / 1e6:.2f} MB"
        parts.append(f"### `{path.name}` ({held.text()}; {sizes})\n")
        if own is not None:
            parts.append(f"{own.what}\n\nCommit {own.commit}, {own.date}.\n")
        if rows:
            parts.append(
                "| member | commit | date | what it measured | holds | cited in |\n|---|---|---|---|---|---|"
            )
            for member, e in sorted(rows.items(), key=lambda kv: int(kv[0][4:-1])):
                mine = holds({n: d for n, d in files.items() if n.startswith(member)})
                docs_citing = {d for d, s, m in cited if s == stem and m.startswith(member)}
                cells = [f"`{member}`", e.commit, e.date, _cell(e.what), mine.text(), _cited(docs_citing)]
                parts.append(f"| {' | '.join(cells)} |")
            parts.append("")
        parts.append(f"Cited in: {_cited({d for d, s, _ in cited if s == stem})}.\n")
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    found = problems()
    if found:
        print("\n".join(found), file=sys.stderr)
        return 1
    text = render()
    if "--check" in argv:
        if INDEX.read_text() != text:
            print(
                f"{INDEX.relative_to(ROOT)} is stale: run python3 {Path(__file__).relative_to(ROOT)}",
                file=sys.stderr,
            )
            return 1
        return 0
    INDEX.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
