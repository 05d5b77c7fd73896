"""Stack pins (DESIGN §4): the TOML files in runners/stacks/ (and the user's folder) that name a
stack and the keys it must have; finding, reading, writing and checking them. No machine probing
here (that is regress/machine/stack.py), so the store and the tokens can name a digest's pin.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from regress.facts import resources
from regress.facts.errors import UserError
from regress.facts.stack_keys import (
    HASHED_KEYS,
    PINNED_KEYS,
    SCHEMA_VERSION,
    Fingerprint,
    drifted_keys,
    stack_digest,
)

STACKS_ENV = "REGRESS_STACKS_DIR"  # the user's folder of pins (a team's private pins, tests)


@dataclass
class Pin:
    name: str
    path: Path
    backend: str
    expected: dict[str, str]
    extra_flags: list[str]
    container: dict[str, str]
    description: str

    @property
    def digest(self) -> str:
        hashed = {k: self.expected.get(k, "") for k in HASHED_KEYS}
        return stack_digest(hashed)


def user_stacks_dir(stacks_dir: Path | None = None) -> Path | None:
    """The folder of the user's own pins: --stacks-dir, else $REGRESS_STACKS_DIR, else none."""
    if stacks_dir is not None:
        return Path(stacks_dir)
    return Path(os.environ[STACKS_ENV]) if os.environ.get(STACKS_ENV) else None


def stacks_search_path(stacks_dir: Path | None = None) -> list[Path]:
    """Where pins are looked up, first match wins: the user's folder, then the shipped pins (the
    checkout's runners/stacks/, or the copy an installed wheel carries)."""
    dirs = [d for d in (user_stacks_dir(stacks_dir),) if d is not None]
    shipped = resources.shipped_stacks_dir()
    return dirs if shipped in dirs else [*dirs, shipped]


def writable_stacks_dir(stacks_dir: Path | None = None) -> Path:
    """Where `regress stack pin` writes: the user's folder, else the checkout's runners/stacks/.
    An installed package's own pins are never written to."""
    user = user_stacks_dir(stacks_dir)
    if user is not None:
        return user
    if resources.in_checkout():
        return resources.shipped_stacks_dir()
    raise UserError(
        f"no folder for your pins: pass --stacks-dir DIR or set ${STACKS_ENV} "
        "(the pins shipped inside the installed package are read-only)"
    )


def _check_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise UserError(f"stack name {name!r} must be letters, digits, '.', '_' or '-'")
    return name


def known_stacks(stacks_dir: Path | None = None) -> list[str]:
    return sorted({p.stem for d in stacks_search_path(stacks_dir) for p in d.glob("*.toml")})


def find_pin(name_or_path: str, stacks_dir: Path | None = None) -> Path:
    """The file of a pin given by path (*.toml) or by name (searched along stacks_search_path)."""
    if name_or_path.endswith(".toml"):
        return Path(name_or_path)
    name = _check_name(name_or_path)
    for d in stacks_search_path(stacks_dir):
        if (d / f"{name}.toml").is_file():
            return d / f"{name}.toml"
    searched = ", ".join(str(d) for d in stacks_search_path(stacks_dir))
    known = ", ".join(known_stacks(stacks_dir)) or "none"
    raise UserError(f"no pinned stack {name!r} (searched {searched}); known stacks: {known}")


def load_pin(name_or_path: str, stacks_dir: Path | None = None) -> Pin:
    path = find_pin(name_or_path, stacks_dir)
    if not path.is_file():
        raise UserError(f"no pinned stack file {path}")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from exc
    stack = data.get("stack", {})
    expected = data.get("expected", {})
    if not isinstance(stack, dict):
        raise UserError(f"{path}: [stack] must be a table")
    if not isinstance(expected, dict) or not expected:
        raise UserError(f"{path}: missing [expected] table")
    missing = [k for k in (*HASHED_KEYS, *PINNED_KEYS) if k not in expected]
    if missing:
        raise UserError(f"{path}: [expected] lacks {', '.join(missing)}")
    # every malformed value is a UserError naming the file: callers that skip a broken pin (the
    # digest index of every import) catch only that
    version = stack.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version != SCHEMA_VERSION:
        raise UserError(f"{path}: pin schema_version {version!r} is not {SCHEMA_VERSION}")
    build, container = data.get("build", {}), data.get("container", {})
    if not isinstance(build, dict) or not isinstance(container, dict):
        raise UserError(f"{path}: [build] and [container] must be tables")
    extra_flags = build.get("extra_flags", [])
    if not isinstance(extra_flags, list):
        raise UserError(f"{path}: [build] extra_flags must be a list of strings")
    return Pin(
        name=str(stack.get("name", path.stem)),
        path=path,
        backend=str(expected["backend"]),
        expected={k: str(v) for k, v in expected.items()},
        extra_flags=[str(f) for f in extra_flags],
        container={str(k): str(v) for k, v in container.items()},
        description=str(stack.get("description", "")),
    )


def pin_for_digest(digest: str, stacks_dir: Path | None = None) -> Pin | None:
    """The pin of this stack digest (see pin_name_for_digest), loaded; None for an unpinned stack.
    What bundle ingest passes the store as the stack's name and facts."""
    name = pin_name_for_digest(digest, stacks_dir)
    return load_pin(name, stacks_dir) if name is not None else None


def pin_name_for_digest(digest: str, stacks_dir: Path | None = None) -> str | None:
    """The name of the pin whose digest this is (your folder first, then the shipped pins), else None.

    Uploads name their stack, but the shared stack row must not take whatever name the first
    uploader chose: the pins, reviewed in the repository, are the source of names."""
    for folder in stacks_search_path(stacks_dir):
        try:
            listing = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in folder.glob("*.toml")))
        except OSError:
            continue
        if (name := _pins_by_digest(str(folder), listing).get(digest)) is not None:
            return name
    return None


@functools.lru_cache(maxsize=8)
def _pins_by_digest(folder: str, listing: tuple[tuple[str, int], ...]) -> dict[str, str]:
    # Keyed by the folder's (name, mtime) listing, so an edited or new pin is read again.
    names: dict[str, str] = {}
    for file_name, _mtime in listing:
        try:
            pin = load_pin(str(Path(folder) / file_name))
        except (UserError, OSError):
            continue  # a broken pin names nothing; `regress stack check` reports it
        names.setdefault(pin.digest, pin.name)
    return names


def write_pin(
    name: str,
    fp: Fingerprint,
    *,
    description: str = "",
    stacks_dir: Path | None = None,
    container: dict[str, str] | None = None,
    overwrite: bool = False,
) -> Path:
    path = writable_stacks_dir(stacks_dir) / f"{_check_name(name)}.toml"
    if path.exists() and not overwrite:
        raise UserError(f"{path} exists; pass --force to replace it")
    doc: dict[str, Any] = {
        "stack": {
            "name": name,
            "schema_version": fp.schema_version,
            "description": description,
            "digest": fp.digest,
        },
        "expected": {k: fp.keys[k] for k in (*HASHED_KEYS, *PINNED_KEYS)},
        "build": {"extra_flags": []},
    }
    if container:
        doc["container"] = container
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(
        f"# Pinned stack {name}: `regress stack check {name}` compares the live machine with it.\n"
        + tomli_w.dumps(doc)
    )
    tmp.replace(path)
    return path


@dataclass
class Drift:
    key: str
    expected: str
    live: str
    hashed: bool


def check_pin(pin: Pin, fp: Fingerprint) -> list[Drift]:
    """Every key whose live value differs from the pin (empty list: the machine matches), by the
    one rule (stack_keys.drifted_keys)."""
    return [
        Drift(key, pin.expected.get(key, ""), fp.keys.get(key, ""), key in HASHED_KEYS)
        for key in drifted_keys(pin.expected, fp.keys)
    ]


def run_drift(pin: Pin | None, fp: Fingerprint, *, allow_drift: bool) -> tuple[Pin | None, list[str]]:
    """(the pin this run's stack is, the drift notes its bundle records in run.host.drift).

    `pin`: the one named by --stack; a drift refuses the run unless `allow_drift`. Without one, the
    pin whose digest this machine has (its hashed keys match): a pinned key that differs there
    (another Python or torch) is recorded, never refused, because a plain nightly promised no pin,
    and the import, service or local, accepts a pinned stack's drift only when the run declares it:
    so a nightly never writes a bundle its own project refuses."""
    if pin is None:
        matched = pin_for_digest(fp.digest)
        drifts = check_pin(matched, fp) if matched is not None else []
        return matched, [format_drift(matched, drifts)] if matched is not None and drifts else []
    drifts = check_pin(pin, fp)
    if drifts and not allow_drift:
        raise UserError(
            format_drift(pin, drifts) + "\n(pass --allow-drift to run anyway, recorded under the live digest)"
        )
    return pin, [format_drift(pin, drifts)] if drifts else []


def format_drift(pin: Pin, drifts: list[Drift]) -> str:
    width = max(len(d.key) for d in drifts)
    lines = [f"stack {pin.name} ({pin.path}) does not match this machine:"]
    for d in drifts:
        mark = "digest" if d.hashed else "pinned"
        lines.append(f"  {d.key:<{width}}  [{mark}]\n    - pinned: {d.expected}\n    + live:   {d.live}")
    return "\n".join(lines)
