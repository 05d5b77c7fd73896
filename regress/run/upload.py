"""Upload client: sends run bundles to `regress serve`, never losing one (DESIGN §8).

Every bundle is first copied into a local spool directory (atomically), then POSTed; it leaves the
spool only when the service answers 200 or 201. While the service is down the bundle waits there and
`flush_spool` (run at the start of every nightly, and by `regress upload --flush`) sends it later.
Nothing is counted twice because the service is idempotent by run id: a resend after a lost answer
gets 200. Bundles the service refuses for their content (any 4xx but 401/403/408/429) move to
spool/rejected/ with the server's reason beside them, so a flush does not resend them forever; auth
failures (401, 403) stay spooled, since a new token fixes them.

No bundle blocks the others: a bundle that still fails after its retries (5xx, network) stays spooled
with its own backoff (<run>.retry beside it: attempts, next try, last error) and the next bundle is
sent all the same. `flush_spool` skips bundles whose next try is not due; `force=True`
(`regress upload --flush`) tries every one now.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from regress.facts.escape import visible

if TYPE_CHECKING:
    import requests

ENV_TOKEN = "REGRESS_TOKEN"
ENV_SPOOL = "REGRESS_SPOOL_DIR"
DEFAULT_SPOOL = Path(".regress") / "spool"
RUNS_PATH = "/api/v1/runs"

# Answers worth retrying: the request may succeed later unchanged.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Answers that do not depend on the bundle: a new token fixes them, so the bundle stays spooled.
AUTH_STATUSES = frozenset({401, 403})
GZIP_OVER_BYTES = 64 * 1024
# A spooled bundle that failed n flushes waits min(cap, base * 2**(n-1)) s before the next flush tries it.
SPOOL_BACKOFF_BASE_S = 60.0
SPOOL_BACKOFF_CAP_S = 3600.0


def is_rejection(code: int) -> bool:
    """A 4xx that says "this bundle will never be accepted as is" (400, 409, 413, 422, ...)."""
    return 400 <= code < 500 and code not in AUTH_STATUSES and code not in RETRY_STATUSES


def default_spool_dir() -> Path:
    return Path(os.environ.get(ENV_SPOOL) or DEFAULT_SPOOL)


@dataclass
class RetryPolicy:
    """Exponential backoff with full jitter: attempt n waits up to min(cap, base * 2**n) seconds."""

    attempts: int = 5
    base_s: float = 0.5
    cap_s: float = 30.0
    timeout_s: float = 60.0  # one attempt, answer read in full included
    deadline_s: float = 600.0  # every attempt and wait of one bundle together

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

    def __init__(self, message: str, *, network: bool) -> None:
        super().__init__(message)
        self.network = network  # no HTTP answer at all (refused, timed out), not a 5xx


def check_token(token: str) -> str:
    """The token, stripped; ValueError (never naming the token: it is a secret) unless it can be
    sent. A token read from a file or secret store often ends in a newline, which requests refused
    with a traceback that printed the whole token."""
    token = token.strip()
    if not token:
        raise ValueError(f"no upload token: set {ENV_TOKEN} (from `regress token create RUNNER`)")
    if not (token.isascii() and token.isprintable()) or " " in token:
        raise ValueError(
            f"{ENV_TOKEN} holds a space, a control or a non-ASCII character, which no token has: "
            "copy it again from `regress token create RUNNER`"
        )
    return token


def check_url(url: str) -> str:
    """The service URL; ValueError unless it is http(s)://HOST[:PORT] (requests raised a traceback)."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ValueError(f"service URL {url!r} is not a URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"service URL {url!r} must be http://HOST[:PORT] or https://HOST[:PORT]")
    return url


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
        token = check_token(token or os.environ.get(ENV_TOKEN, ""))
        self.endpoint = check_url(url).rstrip("/") + RUNS_PATH
        self.policy = policy or RetryPolicy()
        import requests  # here, not at module top: `regress --help` need not pay for it

        self.session = session or requests.Session()
        self.session.headers.update({"Authorization": f"Bearer {token}", "User-Agent": "regress-upload"})
        self.sleep = sleep

    def post(self, payload: bytes, attempts: int | None = None) -> Answer:
        """POSTs one bundle, retrying connection errors, torn answers and retryable statuses with
        backoff. Each attempt, reading the whole answer included, ends after timeout_s (requests'
        timeout bounds each socket read only: an answer dripped a byte at a time held one attempt
        150 s against 60; issue 41 item 21), and all of them after deadline_s."""
        import requests
        from urllib3.exceptions import HTTPError  # raised by the raw reads of _read_answer

        attempts = attempts or self.policy.attempts
        headers = {"Content-Type": "application/json"}
        if len(payload) > GZIP_OVER_BYTES:
            payload = gzip.compress(payload, compresslevel=5)
            headers["Content-Encoding"] = "gzip"
        last, network = "", False
        give_up = time.monotonic() + self.policy.deadline_s
        for attempt in range(attempts):
            retry_after = None
            ends = min(give_up, time.monotonic() + self.policy.timeout_s)
            try:
                # No redirects: requests turns a POST answered 301/302 (an http:// URL behind an
                # https proxy) into a GET of the run list, whose 200 the spool took for "stored".
                resp = self.session.post(
                    self.endpoint,
                    data=payload,
                    headers=headers,
                    timeout=max(0.1, ends - time.monotonic()),
                    allow_redirects=False,
                    stream=True,
                )
                answer = _read_answer(resp, ends)
            except (requests.RequestException, HTTPError, OSError) as exc:  # refused, cut off, torn, slow
                last, network = f"{type(exc).__name__}: {exc}", True
            else:
                if answer.status_code not in RETRY_STATUSES:
                    return answer
                last, network = f"HTTP {answer.status_code}: {_error_text(answer)}", False
                retry_after = answer.headers.get("Retry-After")
            if attempt < attempts - 1:
                wait = self.policy.delay(attempt, retry_after)
                if time.monotonic() + wait >= give_up:
                    last += f" (the deadline of {self.policy.deadline_s:g} s is up)"
                    break
                self.sleep(wait)
        raise _Unreachable(f"{self.endpoint}: {last} (after {attempt + 1} attempts)", network=network)


ANSWER_LIMIT_BYTES = 1 << 20  # the service's answers are a few hundred bytes


@dataclass
class Answer:
    """An HTTP answer read in full within its deadline."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _read_answer(resp: requests.Response, ends: float) -> Answer:
    """The whole body by `ends` (monotonic), at most ANSWER_LIMIT_BYTES; TimeoutError past either.
    A body cut short of its Content-Length raises from urllib3 (requests' ChunkedEncodingError)."""
    body = bytearray()
    # read1: what has arrived, at least a byte (iter_content blocks until a whole chunk is in).
    read = getattr(resp.raw, "read1", None) or (lambda n, decode_content: resp.raw.read(1, decode_content))
    try:
        while piece := read(8192, decode_content=True):
            body += piece
            if time.monotonic() > ends:
                raise TimeoutError("the answer did not arrive in time")
            if len(body) > ANSWER_LIMIT_BYTES:
                raise TimeoutError(f"the answer is larger than {ANSWER_LIMIT_BYTES} bytes")
        declared = resp.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) != len(body):
            raise TimeoutError(f"the answer was cut off ({len(body)} of {declared} bytes)")
    finally:
        resp.close()
    return Answer(resp.status_code, resp.headers, bytes(body))


def _error_text(resp: Answer) -> str:
    try:
        doc = resp.json()
    except ValueError:
        return resp.text[:500]
    # A proxy's JSON need not be an object: .get on a list raised AttributeError.
    return str(doc.get("error", resp.text) if isinstance(doc, dict) else doc)[:500]


def _confirmed(resp: Answer, run_id: str, sha256: str) -> str | None:
    """None when the answer is the service's JSON naming this run and the SHA-256 of the bytes
    sent; else why not. Anything else with status 200 (a proxy's maintenance page, a torn or
    foreign answer) was taken for "stored" and the bundle deleted (issue 41 item 20)."""
    try:
        doc = resp.json()
    except ValueError:
        return "the answer is not JSON"
    if not isinstance(doc, dict):
        return "the answer is not a JSON object"
    if doc.get("run_id") != run_id:
        return f"the answer names run {str(doc.get('run_id'))[:40]!r}, not {run_id}"
    if doc.get("sha256") != sha256:
        return "the answer's sha256 is not that of the bundle sent"
    return None


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


def _retry_file(spooled: Path) -> Path:
    return spooled.with_suffix(".retry")  # not *.json: never taken for a bundle


@dataclass
class _Backoff:
    attempts: int = 0
    next_try: float = 0.0
    last_error: str = ""

    @classmethod
    def load(cls, spooled: Path) -> _Backoff:
        try:
            doc = json.loads(_retry_file(spooled).read_text())
            return cls(int(doc["attempts"]), float(doc["next_try"]), str(doc.get("last_error", "")))
        except (OSError, ValueError, KeyError, TypeError):
            return cls()

    def failed(self, spooled: Path, error: str, now: float) -> None:
        self.attempts += 1
        wait = min(SPOOL_BACKOFF_CAP_S, SPOOL_BACKOFF_BASE_S * 2 ** (self.attempts - 1))
        self.next_try, self.last_error = now + wait, error
        tmp = _retry_file(spooled).with_suffix(".retry.tmp")
        doc = {"attempts": self.attempts, "next_try": self.next_try, "last_error": error}
        tmp.write_text(json.dumps(doc))
        tmp.replace(_retry_file(spooled))


def _reject(spool_dir: Path, spooled: Path, reason: str) -> None:
    rejected = spool_dir / "rejected"
    rejected.mkdir(parents=True, exist_ok=True)
    spooled.replace(rejected / spooled.name)
    (rejected / (spooled.stem + ".reason.txt")).write_text(reason + "\n")
    _retry_file(spooled).unlink(missing_ok=True)


def _send_spooled(
    client: UploadClient, spool_dir: Path, spooled: Path, origin: Path, attempts: int | None = None
) -> UploadOutcome:
    """Sends one spooled file; removes it once stored, moves it aside if refused for its content."""
    from regress.facts.bundle import BundleError, read_bundle  # jsonschema: only when a bundle is read

    try:
        bundle = read_bundle(spooled)  # the schema check, before anything is sent
    except BundleError as exc:
        _reject(spool_dir, spooled, f"invalid bundle: {exc}")
        return UploadOutcome(origin, None, "invalid", message=str(exc))
    run_id = bundle["run"]["id"]
    payload = json.dumps(bundle, sort_keys=True, default=str).encode()
    resp = client.post(payload, attempts)
    code = resp.status_code
    if code in (200, 201):
        doubt = _confirmed(resp, run_id, hashlib.sha256(payload).hexdigest())
        if doubt is not None:  # kept in the spool: only an answer that names it proves it stored
            message = f"HTTP {code}, but {doubt}: kept in the spool"
            _Backoff.load(spooled).failed(spooled, message, time.time())
            return UploadOutcome(origin, run_id, "spooled", code, message)
        spooled.unlink(missing_ok=True)
        _retry_file(spooled).unlink(missing_ok=True)
        key = resp.json().get("key", run_id)  # another runner's run held this id first (store/run.py)
        message = "" if key == run_id else f"stored under the key {visible(str(key)[:40])}"
        return UploadOutcome(origin, run_id, "stored" if code == 201 else "duplicate", code, message)
    message = _error_text(resp)
    if 300 <= code < 400:
        message = f"the service redirects to {resp.headers.get('Location')!r}: pass that as the URL"
    if is_rejection(code):
        _reject(spool_dir, spooled, f"HTTP {code}: {message}")
        return UploadOutcome(origin, run_id, "rejected", code, message)
    return UploadOutcome(origin, run_id, "spooled", code, message)


def spool_bundle(bundle: dict[str, Any], spool_dir: Path | str | None = None) -> Path:
    """Puts a (validated) bundle in the spool, where the next flush sends it; returns its path.
    Without the spool's lock: the nightly calls it inside a database transaction, and a flusher
    only ever sees the whole file (temp file + rename)."""
    return _spool(bundle, Path(spool_dir) if spool_dir is not None else default_spool_dir())


def _spool(bundle: dict[str, Any], spool_dir: Path) -> Path:
    from regress.facts.bundle import write_bundle

    return write_bundle(bundle, spool_dir)  # temp file + rename: a crash never leaves half a bundle


def _send_all(
    client: UploadClient,
    spool_dir: Path,
    items: Iterable[tuple[Path, Path]],
    report: UploadReport,
    *,
    force: bool = True,
) -> None:
    """Sends each bundle in turn; one that fails keeps its own backoff and the next is still sent."""
    network_down = False
    for spooled, origin in items:
        backoff = _Backoff.load(spooled)
        now = time.time()
        if not force and backoff.next_try > now:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(backoff.next_try))
            message = f"waiting: failed {backoff.attempts}x ({backoff.last_error}); next try after {when}"
            report.outcomes.append(UploadOutcome(origin, spooled.stem, "spooled", message=message))
            continue
        # Once the service did not answer at all, later bundles get one try each: still sent, but
        # without sitting through the whole retry ladder again for every one of them.
        attempts = 1 if network_down else None
        try:
            report.outcomes.append(_send_spooled(client, spool_dir, spooled, origin, attempts))
        except _Unreachable as exc:
            network_down = network_down or exc.network
            backoff.failed(spooled, str(exc), now)
            message = f"service unreachable, kept in {spool_dir} (try {backoff.attempts}): {exc}"
            report.outcomes.append(UploadOutcome(origin, spooled.stem, "spooled", message=message))


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
    from regress.facts.bundle import BundleError, read_bundle

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
    force: bool = False,
) -> UploadReport:
    """Sends every spooled bundle that is due, oldest first; those the service holds leave the spool.

    Same defaults as `upload_bundles`; an empty or missing spool is a no-op (no token needed).
    force=True also sends bundles still inside their backoff (`regress upload --flush`).
    """
    spool = Path(spool_dir) if spool_dir is not None else default_spool_dir()
    report = UploadReport()
    if not spooled_files(spool):
        return report
    client = client or UploadClient(url, token, policy=policy)
    with _spool_lock(spool):
        files = spooled_files(spool)
        _send_all(client, spool, [(f, f) for f in files], report, force=force)
    return report
