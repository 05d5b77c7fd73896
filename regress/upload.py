"""Upload client: sends run bundles to `regress serve`, never losing one (DESIGN §8).

Every bundle is first copied into a local spool directory (atomically), then POSTed; it leaves the
spool only when the service answers 200 or 201. While the service is down the bundle waits there and
`flush_spool` (run at the start of every nightly, and by `regress upload --flush`) sends it later.
Nothing is counted twice because the service is idempotent by run id: a resend after a lost answer
gets 200. Bundles the service refuses for their content (400, 409, 413) move to spool/rejected/ with
the reason beside them, so a flush does not resend them forever; auth failures (401, 403) stay
spooled, since a new token fixes them.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from .bundle import BundleError, read_bundle, write_bundle

ENV_TOKEN = "REGRESS_TOKEN"
ENV_SPOOL = "REGRESS_SPOOL_DIR"
DEFAULT_SPOOL = Path(".regress") / "spool"
RUNS_PATH = "/api/v1/runs"

# Answers worth retrying: the request may succeed later unchanged.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Answers that mean "this bundle will never be accepted as is".
REJECT_STATUSES = frozenset({400, 409, 413, 422})
GZIP_OVER_BYTES = 64 * 1024


def default_spool_dir() -> Path:
    return Path(os.environ.get(ENV_SPOOL) or DEFAULT_SPOOL)


@dataclass
class RetryPolicy:
    """Exponential backoff with full jitter: attempt n waits up to min(cap, base * 2**n) seconds."""

    attempts: int = 5
    base_s: float = 0.5
    cap_s: float = 30.0
    timeout_s: float = 60.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        if retry_after and retry_after.isdigit():
            return min(self.cap_s, float(retry_after))
        return random.uniform(0, min(self.cap_s, self.base_s * 2**attempt))


@dataclass
class UploadOutcome:
    path: Path
    run_id: str | None
    state: str  # stored | duplicate | spooled | rejected | invalid
    status: int | None = None
    message: str = ""


@dataclass
class UploadReport:
    outcomes: list[UploadOutcome] = field(default_factory=list)

    def _ids(self, *states: str) -> list[str]:
        return [o.run_id or str(o.path) for o in self.outcomes if o.state in states]

    @property
    def stored(self) -> list[str]:
        """Run ids the service now holds (new, or already there)."""
        return self._ids("stored", "duplicate")

    @property
    def spooled(self) -> list[str]:
        """Run ids still waiting in the spool (service unreachable, busy, or the token refused)."""
        return self._ids("spooled")

    @property
    def rejected(self) -> list[str]:
        """Bundles the service or the local check refused for their content."""
        return self._ids("rejected", "invalid")

    @property
    def ok(self) -> bool:
        return not self.spooled and not self.rejected

    def lines(self) -> list[str]:
        out = []
        for o in self.outcomes:
            code = f" [{o.status}]" if o.status else ""
            out.append(f"{o.state:<9} {o.run_id or o.path}{code}{': ' + o.message if o.message else ''}")
        return out


class _Unreachable(Exception):
    """The service did not answer usefully after every retry (down, or busy throughout)."""


class UploadClient:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        policy: RetryPolicy | None = None,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        token = token or os.environ.get(ENV_TOKEN, "")
        if not token:
            raise ValueError(f"no upload token: set {ENV_TOKEN} (from `regress token create RUNNER`)")
        self.endpoint = url.rstrip("/") + RUNS_PATH
        self.policy = policy or RetryPolicy()
        self.session = session or requests.Session()
        self.session.headers.update({"Authorization": f"Bearer {token}", "User-Agent": "regress-upload"})
        self.sleep = sleep

    def post(self, payload: bytes) -> requests.Response:
        """POSTs one bundle, retrying connection errors and retryable statuses with backoff."""
        headers = {"Content-Type": "application/json"}
        if len(payload) > GZIP_OVER_BYTES:
            payload = gzip.compress(payload, compresslevel=5)
            headers["Content-Encoding"] = "gzip"
        last = ""
        for attempt in range(self.policy.attempts):
            retry_after = None
            try:
                resp = self.session.post(
                    self.endpoint, data=payload, headers=headers, timeout=self.policy.timeout_s
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code not in RETRY_STATUSES:
                    return resp
                last = f"HTTP {resp.status_code}: {_error_text(resp)}"
                retry_after = resp.headers.get("Retry-After")
            if attempt < self.policy.attempts - 1:
                self.sleep(self.policy.delay(attempt, retry_after))
        raise _Unreachable(f"{self.endpoint}: {last} (after {self.policy.attempts} attempts)")


def _error_text(resp: requests.Response) -> str:
    try:
        return str(resp.json().get("error", resp.text))[:500]
    except ValueError:
        return resp.text[:500]


@contextmanager
def _spool_lock(spool_dir: Path) -> Iterator[None]:
    """One flusher per spool at a time, so two nightlies on one host do not race on a file."""
    spool_dir.mkdir(parents=True, exist_ok=True)
    with open(spool_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _reject(spool_dir: Path, spooled: Path, reason: str) -> None:
    rejected = spool_dir / "rejected"
    rejected.mkdir(parents=True, exist_ok=True)
    spooled.replace(rejected / spooled.name)
    (rejected / (spooled.stem + ".reason.txt")).write_text(reason + "\n")


def _send_spooled(client: UploadClient, spool_dir: Path, spooled: Path, origin: Path) -> UploadOutcome:
    """Sends one spooled file; removes it once stored, moves it aside if refused for its content."""
    try:
        bundle = read_bundle(spooled)
    except BundleError as exc:
        _reject(spool_dir, spooled, f"invalid bundle: {exc}")
        return UploadOutcome(origin, None, "invalid", message=str(exc))
    run_id = bundle["run"]["id"]
    resp = client.post(json.dumps(bundle, sort_keys=True, default=str).encode())
    code = resp.status_code
    if code in (200, 201):
        spooled.unlink(missing_ok=True)
        return UploadOutcome(origin, run_id, "stored" if code == 201 else "duplicate", code)
    message = _error_text(resp)
    if code in REJECT_STATUSES:
        _reject(spool_dir, spooled, f"HTTP {code}: {message}")
        return UploadOutcome(origin, run_id, "rejected", code, message)
    return UploadOutcome(origin, run_id, "spooled", code, message)


def _spool(bundle: dict[str, Any], spool_dir: Path) -> Path:
    return write_bundle(bundle, spool_dir)  # temp file + rename: a crash never leaves half a bundle


def _send_all(
    client: UploadClient, spool_dir: Path, items: Iterable[tuple[Path, Path]], report: UploadReport
) -> None:
    down: str | None = None
    for spooled, origin in items:
        if down is not None:
            # One unreachable answer is enough: do not sit through the backoff again for each bundle.
            report.outcomes.append(UploadOutcome(origin, spooled.stem, "spooled", message=down))
            continue
        try:
            report.outcomes.append(_send_spooled(client, spool_dir, spooled, origin))
        except _Unreachable as exc:
            down = f"service unreachable, kept in {spool_dir}: {exc}"
            report.outcomes.append(UploadOutcome(origin, spooled.stem, "spooled", message=down))


def upload_bundles(
    paths: Iterable[Path | str],
    url: str,
    token: str | None = None,
    spool_dir: Path | str | None = None,
    *,
    policy: RetryPolicy | None = None,
    client: UploadClient | None = None,
) -> UploadReport:
    """Spools then uploads each bundle file. Invalid files are reported and not spooled.

    `token` defaults to $REGRESS_TOKEN, `spool_dir` to $REGRESS_SPOOL_DIR or ./.regress/spool.
    Raises ValueError without a token; never raises for an unreachable service (it spools).
    """
    spool = Path(spool_dir) if spool_dir is not None else default_spool_dir()
    client = client or UploadClient(url, token, policy=policy)
    report = UploadReport()
    items: list[tuple[Path, Path]] = []
    with _spool_lock(spool):
        for raw in paths:
            path = Path(raw)
            try:
                bundle = read_bundle(path)
            except BundleError as exc:
                report.outcomes.append(UploadOutcome(path, None, "invalid", message=str(exc)))
                continue
            items.append((_spool(bundle, spool), path))
        _send_all(client, spool, items, report)
    return report


def spooled_files(spool_dir: Path | str | None = None) -> list[Path]:
    """Bundles waiting in the spool, oldest run first (run ids sort by time)."""
    spool = Path(spool_dir) if spool_dir is not None else default_spool_dir()
    return sorted(spool.glob("*.json")) if spool.is_dir() else []


def flush_spool(
    url: str,
    token: str | None = None,
    spool_dir: Path | str | None = None,
    *,
    policy: RetryPolicy | None = None,
    client: UploadClient | None = None,
) -> UploadReport:
    """Sends every spooled bundle, oldest first; those the service holds leave the spool.

    Same defaults as `upload_bundles`; an empty or missing spool is a no-op (no token needed).
    """
    spool = Path(spool_dir) if spool_dir is not None else default_spool_dir()
    report = UploadReport()
    if not spooled_files(spool):
        return report
    client = client or UploadClient(url, token, policy=policy)
    with _spool_lock(spool):
        files = spooled_files(spool)
        _send_all(client, spool, [(f, f) for f in files], report)
    return report
