"""Stack fingerprint (DESIGN §4): what the kernel was built and run on, and whether it drifted.

Keys come in three kinds:
- HASHED keys break history (toolkit, compiler, flags, driver, firmware, GPU product and arch,
  backend); they form the digest, so a time series is (case, digest).
- PINNED keys are checked against the pin file but not hashed (OS kernel, torch, baseline library,
  Python): a runner's torch upgrade is visible and refused without a pin update, yet does not split
  the kernel's history.
- DIAGNOSTIC facts (hostname, GPU serial/UUID, clocks, temperatures) are stored beside the run and
  never compared.
The key lists and the digest are pure and live in regress/stack_keys.py; this module probes the
machine for them and reads, writes and checks the pins.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from . import resources
from .errors import UserError
from .stack_keys import HASHED_KEYS, PINNED_KEYS, SCHEMA_VERSION, Fingerprint, stack_digest

STACKS_ENV = "REGRESS_STACKS_DIR"  # the user's folder of pins (a team's private pins, tests)
NOT_APPLICABLE = "n/a"


def _run(argv: list[str], timeout: float = 20) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version_of(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return "absent"


def _compiler_identity(backend: str, compile_only: bool) -> tuple[str, list[str]]:
    """(the compiler's --version identity on one line, the build flags without paths)."""
    from .build import COMMANDS, OUT, BuildError, compiler_version

    compile_only = compile_only or backend == "hip-emu"
    recipe = COMMANDS["hip-compile-only" if backend in ("hip", "hip-emu") and compile_only else backend]
    try:
        # Every identifying line: nvcc's first line names no version, its third does.
        version = "; ".join(compiler_version(recipe.argv[0]).splitlines()) or "unknown"
    except BuildError:
        version = f"{recipe.argv[0]}: not found"
    flags = [a for a in recipe.argv[1:] if a not in (OUT, "-o", recipe.source)]
    return version, flags


def _nvidia_facts() -> tuple[dict[str, str], dict[str, Any]]:
    out = _run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,vbios_version,compute_cap,serial,uuid,clocks.sm,temperature.gpu",
            "--format=csv,noheader",
        ]
    )
    keys = {"gpu_product": "unknown", "driver": "unknown", "firmware": "unknown", "gpu_arch": "unknown"}
    diag: dict[str, Any] = {}
    if out:
        gpus = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
        name, driver, vbios, cc = gpus[0][:4]
        keys = {
            "gpu_product": name,
            "driver": driver,
            "firmware": vbios,
            "gpu_arch": "sm_" + cc.replace(".", ""),
        }
        diag["gpus"] = [
            {"index": i, "serial": g[4], "uuid": g[5], "clock_sm": g[6], "temperature": g[7]}
            for i, g in enumerate(gpus)
            if len(g) >= 8
        ]
    nvcc = _run(["nvcc", "--version"]) or ""
    m = re.search(r"release ([\d.]+), V([\d.]+)", nvcc)
    keys["toolkit"] = f"cuda {m.group(2)}" if m else "cuda unknown"
    return keys, diag


def _rocm_facts() -> tuple[dict[str, str], dict[str, Any]]:
    keys = {"gpu_product": "unknown", "driver": "unknown", "firmware": "unknown", "gpu_arch": "unknown"}
    diag: dict[str, Any] = {}
    agents = _run(["rocminfo"]) or ""
    if m := re.search(r"Name:\s+(gfx\d+\w*)", agents):
        keys["gpu_arch"] = m.group(1)
    if m := re.search(r"Marketing Name:\s+(AMD Instinct.*|.*MI3\d\d.*)", agents):
        keys["gpu_product"] = m.group(1).strip()
    smi = _run(["rocm-smi", "--showdriverversion", "--showvbios", "--showserial", "--json"])
    if smi:
        try:
            data = json.loads(smi)
            first = next(v for k, v in data.items() if k.startswith("card"))
            keys["firmware"] = str(first.get("VBIOS version", "unknown"))
            diag["gpus"] = [
                {"card": k, "serial": v.get("Serial Number")} for k, v in data.items() if k.startswith("card")
            ]
            keys["driver"] = str(data.get("system", {}).get("Driver version", "unknown"))
        except (ValueError, StopIteration, AttributeError):
            pass
    version_file = Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / ".info" / "version"
    keys["toolkit"] = f"rocm {version_file.read_text().strip()}" if version_file.is_file() else "rocm unknown"
    return keys, diag


def live_fingerprint(
    backend: str, *, compile_only: bool = False, extra_flags: list[str] | None = None
) -> Fingerprint:
    """Reads the fingerprint of this machine for `backend` ("cpu", "cuda", "hip" or "hip-emu")."""
    if backend == "cuda":
        keys, diag = _nvidia_facts()
        baseline = f"torch-sdpa {_version_of('torch')}"
    elif backend == "hip":
        keys, diag = _rocm_facts()
        if compile_only:
            keys.update(gpu_product="none (compile only)", driver=NOT_APPLICABLE, firmware=NOT_APPLICABLE)
            keys["gpu_arch"] = "gfx942"
        baseline = f"aiter {_version_of('aiter')}"
    elif backend == "hip-emu":
        from .emu import EMU_VERSION

        # The emulated gfx942: its identity is the emulator's version; the code object's sha256 is
        # recorded per run by the build (artifact_hash), not hashed here, so that a kernel change
        # stays on the same history instead of starting a new stack.
        keys = {
            "gpu_arch": "gfx942",
            "gpu_product": "gfx942 instruction-level emulator (CPU)",
            "driver": NOT_APPLICABLE,
            "firmware": NOT_APPLICABLE,
            "toolkit": EMU_VERSION,
        }
        diag = {"cpus": os.cpu_count(), "cpu_model": _cpu_model()}
        baseline = f"torch-sdpa {_version_of('torch')}"
    elif backend == "cpu":
        keys = {
            "gpu_arch": f"cpu-{platform.machine()}",
            "gpu_product": _cpu_model(),
            "driver": NOT_APPLICABLE,
            "firmware": NOT_APPLICABLE,
            "toolkit": NOT_APPLICABLE,
        }
        diag = {"cpus": os.cpu_count()}
        baseline = f"torch-sdpa {_version_of('torch')}"
    else:
        raise UserError(f"unknown backend {backend!r}; expected cpu, cuda, hip or hip-emu")
    compiler, flags = _compiler_identity(backend, compile_only)
    keys.update(
        backend=backend,
        compiler=compiler,
        build_flags=" ".join([*flags, *(extra_flags or [])]),
        os_kernel=platform.release(),
        torch=_version_of("torch"),
        baseline_library=baseline,
        python=platform.python_version(),
    )
    diag["hostname"] = socket.gethostname()
    return Fingerprint(keys=keys, diagnostics=diag)


# ---- pins -------------------------------------------------------------------------------------


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
    if int(stack.get("schema_version", SCHEMA_VERSION)) != SCHEMA_VERSION:
        raise UserError(f"{path}: pin schema_version {stack.get('schema_version')} is not {SCHEMA_VERSION}")
    return Pin(
        name=str(stack.get("name", path.stem)),
        path=path,
        backend=str(expected["backend"]),
        expected={k: str(v) for k, v in expected.items()},
        extra_flags=[str(f) for f in data.get("build", {}).get("extra_flags", [])],
        container={str(k): str(v) for k, v in data.get("container", {}).items()},
        description=str(stack.get("description", "")),
    )


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
    """Every key whose live value differs from the pin (empty list: the machine matches)."""
    drifts = []
    for key in (*HASHED_KEYS, *PINNED_KEYS):
        expected, live = pin.expected.get(key, ""), fp.keys.get(key, "")
        if expected != live:
            drifts.append(Drift(key, expected, live, key in HASHED_KEYS))
    return drifts


def format_drift(pin: Pin, drifts: list[Drift]) -> str:
    width = max(len(d.key) for d in drifts)
    lines = [f"stack {pin.name} ({pin.path}) does not match this machine:"]
    for d in drifts:
        mark = "digest" if d.hashed else "pinned"
        lines.append(f"  {d.key:<{width}}  [{mark}]\n    - pinned: {d.expected}\n    + live:   {d.live}")
    return "\n".join(lines)
