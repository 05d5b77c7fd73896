"""Writes pages: content-addressed, incremental, in forked workers when there are many.

Each page has a data key (a hash of what it is built from, plus the templates and assets); a page
whose key matches the manifest of the previous render is neither rendered nor written. A rendered
page whose content hash matches the manifest is not written either, so file times only move for
pages that really changed (a static host's sync then uploads just those).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment

MANIFEST_VERSION = 1
PARALLEL_MIN_PAGES = 64  # below this, forking costs more than it saves
_JOBS: tuple[SiteWriter, list[Any], int] | None = None  # the forked workers' view of the queue


def _workers() -> int:
    if sys.platform != "linux":  # fork is the cheap way to share the model; elsewhere stay serial
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


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
        self.manifest_path = out / ".regress-site" / "manifest.json"
        self.old: dict[str, list[str]] = {}
        if not full:
            try:
                doc = json.loads(self.manifest_path.read_text())
                if doc.get("version") == MANIFEST_VERSION:
                    self.old = doc["pages"]
            except (OSError, ValueError, KeyError):
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
        content = self.env.get_template(template).render(**ctx).encode()
        digest, written = self._store(rel, content, self.old.get(rel))
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
                with multiprocessing.get_context("fork").Pool(workers) as pool:
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

    def _store(self, rel: str, content: bytes, prev: list[str] | None) -> tuple[str, bool]:
        """Writes content unless the file already holds it; returns (content hash, written)."""
        digest = hashlib.sha1(content).hexdigest()
        target = self.out / rel
        if prev and prev[1] == digest and target.exists():
            return digest, False
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(content)
        os.replace(tmp, target)  # readers never see half a page
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
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": MANIFEST_VERSION, "pages": self.new}, separators=(",", ":")))
        os.replace(tmp, self.manifest_path)
        return self.stats


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
