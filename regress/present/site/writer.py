"""Writes pages: content-addressed, incremental, in forked workers when there are many.

Each page has a data key (a hash of what it is built from, plus the templates and assets); a page
whose key matches the manifest of the previous render is neither rendered nor written. A rendered
page whose content hash matches the manifest is not written either, so file times only move for
pages that really changed (a static host's sync then uploads just those).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment

from regress.facts.errors import UserError

MANIFEST_VERSION = 1
PARALLEL_MIN_PAGES = 64  # below this, forking costs more than it saves
_JOBS: tuple[SiteWriter, list[Any], int] | None = None  # the forked workers' view of the queue
STATE_DIR = ".regress-site"  # manifest, caches, lock and temporaries: never a published page
TMP_DIR = "tmp"  # under STATE_DIR: same filesystem as the pages (os.replace), outside the tree
LOCK_FILE = "lock"
# Temporaries of the renders before issue 24, written beside their page: swept on the next render.
_LEGACY_TMP = re.compile(r"^\..+\.\d+\.tmp$")
_LEGACY_STATE_TMP = ("results.tmp.npz", "results.json.tmp", "manifest.tmp")


@contextmanager
def render_lock(out: Path) -> Iterator[None]:
    """Holds <out>/.regress-site/lock for one render; a second render into the same folder is refused
    with one line (two at once failed 6 of 20 times: issue 24). flock dies with its process, so a
    SIGKILLed render never leaves a stale lock. On entry, what a killed render left is removed."""
    state = out / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    with (state / LOCK_FILE).open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip()
            raise UserError(
                f"another `regress site` is rendering into {out}{f' (pid {holder})' if holder else ''}: "
                "wait for it to finish or pass another --out (one render per folder at a time)"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        _sweep_temporaries(out)
        yield


def _sweep_temporaries(out: Path) -> None:
    shutil.rmtree(out / STATE_DIR / TMP_DIR, ignore_errors=True)
    for name in _LEGACY_STATE_TMP:
        (out / STATE_DIR / name).unlink(missing_ok=True)
    for folder, dirs, files in os.walk(out):
        dirs[:] = [d for d in dirs if d != STATE_DIR]
        for name in files:
            if _LEGACY_TMP.match(name):
                Path(folder, name).unlink(missing_ok=True)


@contextmanager
def atomic_path(target: Path, tmp_dir: Path) -> Iterator[Path]:
    """A temporary path in tmp_dir that replaces `target` when the block succeeds and is removed when
    it fails (a full disk left results.tmp.npz behind: issue 24). Readers never see half a file."""
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = tmp_dir / f"{os.getpid()}-{target.name}"
    try:
        yield tmp
        if tmp.exists():  # the block may have decided to keep the target as it is
            os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _workers() -> int:
    if sys.platform != "linux":  # fork is the cheap way to share the model; elsewhere stay serial
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def _worker_signals() -> None:
    """A forked worker leaves stop signals to its parent, which ends the pool (`terminate` sends
    SIGTERM): the parent's raising handler, inherited by the fork, would print a worker traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _render_share(k: int) -> list[tuple[str, str, str, bool]]:
    assert _JOBS is not None
    writer, jobs, n = _JOBS
    return [writer._render(job) for job in jobs[k::n]]


def sha(*parts: str | bytes) -> str:
    h = hashlib.sha1()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()


@dataclass
class WriteStats:
    pages: int = 0
    rendered: int = 0
    written: int = 0
    removed: int = 0
    written_paths: list[str] = field(default_factory=list)


class SiteWriter:
    """Content-addressed page writer over a manifest kept in <out>/.regress-site/."""

    def __init__(self, out: Path, env: Environment, assets_hash: str, *, full: bool) -> None:
        self.out = out
        self.env = env
        self.assets_hash = assets_hash
        self.full = full
        self.manifest_path = out / STATE_DIR / "manifest.json"
        self.tmp_dir = out / STATE_DIR / TMP_DIR
        self.old: dict[str, list[str]] = {}
        if not full:
            try:
                self.old = _manifest_pages(json.loads(self.manifest_path.read_text()))
            except (OSError, ValueError):
                self.old = {}
        self.new: dict[str, list[str]] = {}
        self.pending: list[tuple[str, str, str, Callable[[], dict[str, Any]]]] = []
        self.stats = WriteStats()

    def page(self, rel: str, template: str, data_key: str, context: Callable[[], dict[str, Any]]) -> None:
        """Queues a page; it is rendered in flush() only if its key differs from the last render."""
        self.stats.pages += 1
        key = sha(self.assets_hash, template, data_key)
        prev = self.old.get(rel)
        if prev and prev[0] == key and (self.out / rel).exists():
            self.new[rel] = prev
            return
        self.pending.append((rel, template, key, context))

    def _render(self, job: tuple[str, str, str, Callable[[], dict[str, Any]]]) -> tuple[str, str, str, bool]:
        rel, template, key, context = job
        ctx = context()
        ctx.setdefault("root", "../" * rel.count("/"))
        ctx.setdefault("page", rel)
        # Streamed: the page goes to its temporary a chunk at a time, hashed on the way, so no page
        # is ever whole in memory (a case page of a 5,000-case shape was 2.3 GB in all: issue 24).
        chunks = self.env.get_template(template).generate(**ctx)
        digest, written = self._store_chunks(rel, (chunk.encode() for chunk in chunks), self.old.get(rel))
        return rel, key, digest, written

    def flush(self) -> None:
        """Renders the queued pages; with many of them, in forked workers (each page is independent
        and rendering is pure Python, so processes are the way past the GIL)."""
        jobs, self.pending = self.pending, []
        workers = _workers() if len(jobs) >= PARALLEL_MIN_PAGES else 1
        if workers > 1:
            global _JOBS
            _JOBS = (self, jobs, workers)
            try:
                with multiprocessing.get_context("fork").Pool(workers, initializer=_worker_signals) as pool:
                    done = [r for chunk in pool.map(_render_share, range(workers)) for r in chunk]
            finally:
                _JOBS = None
        else:
            done = [self._render(job) for job in jobs]
        for rel, key, digest, written in done:
            self.new[rel] = [key, digest]
            self.stats.rendered += 1
            if written:
                self.stats.written += 1
                self.stats.written_paths.append(rel)

    def raw(self, rel: str, content: bytes) -> None:
        self.stats.pages += 1
        digest, written = self._store(rel, content, self.old.get(rel))
        self.new[rel] = [digest, digest]
        if written:
            self.stats.written += 1
            self.stats.written_paths.append(rel)

    def _store_chunks(self, rel: str, chunks: Iterator[bytes], prev: list[str] | None) -> tuple[str, bool]:
        """Like _store, for content that arrives in pieces: written to a temporary while hashed, and
        kept only if its hash differs from the last render's (or the page is missing)."""
        target = self.out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha1()
        with atomic_path(target, self.tmp_dir) as tmp:
            with tmp.open("wb") as fh:
                for chunk in chunks:
                    h.update(chunk)
                    fh.write(chunk)
            digest = h.hexdigest()
            if prev and prev[1] == digest and target.exists():
                tmp.unlink()
                return digest, False
        return digest, True

    def _store(self, rel: str, content: bytes, prev: list[str] | None) -> tuple[str, bool]:
        """Writes content unless the file already holds it; returns (content hash, written)."""
        digest = hashlib.sha1(content).hexdigest()
        target = self.out / rel
        if prev and prev[1] == digest and target.exists():
            return digest, False
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(target, self.tmp_dir) as tmp:  # outside the published tree
            tmp.write_bytes(content)
        return digest, True

    def finish(self) -> WriteStats:
        self.flush()
        root = self.out.resolve()
        for rel in set(self.old) - set(self.new):  # pages of runs or cases that are gone
            path = self.out / rel
            # The manifest is a file anyone with write access to <out> can edit: never follow it
            # outside the output folder ("../x", "/etc/x", a symlinked folder).
            if not path.resolve().is_relative_to(root):
                continue
            if path.is_file():
                path.unlink()
                self.stats.removed += 1
        self.manifest_path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"version": MANIFEST_VERSION, "pages": self.new}
        with atomic_path(self.manifest_path, self.tmp_dir) as tmp:
            tmp.write_text(json.dumps(doc, separators=(",", ":")))
        return self.stats


def _manifest_pages(doc: Any) -> dict[str, list[str]]:
    """The pages of a manifest, or {} when it is not the shape this version writes (valid JSON of
    another shape crashed the render: issue 24); a lost manifest only costs a full rewrite."""
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION:
        return {}
    pages = doc.get("pages")
    if not isinstance(pages, dict):
        return {}
    ok = all(
        isinstance(rel, str) and isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)
        for rel, v in pages.items()
    )
    return pages if ok else {}


def copy_static(writer: SiteWriter, static: Path) -> None:
    for path in sorted(static.rglob("*")):
        if path.is_file():
            writer.raw("static/" + path.relative_to(static).as_posix(), path.read_bytes())


def assets_hash(web: Path) -> str:
    h = hashlib.sha1()
    for path in sorted(web.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(web).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()
