"""Stack fingerprint (DESIGN §4): what the kernel was built and run on, and whether it drifted.

Keys come in three kinds:
- HASHED keys break history (toolkit, compiler, flags, driver, firmware, GPU product and arch,
  backend); they form the digest, so a time series is (case, digest).
- PINNED keys are checked against the pin file but not hashed (torch, baseline library, Python): a
  runner's torch upgrade is visible and refused without a pin update, yet does not split the
  kernel's history.
- DIAGNOSTIC facts (hostname, OS kernel build, GPU serial/UUID, clocks, temperatures) are stored
  beside the run and never compared.
The key lists and the digest are pure and live in regress/facts/stack_keys.py; this module probes the
machine for them and reads, writes and checks the pins.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from regress.facts.backends import BACKENDS
from regress.facts.errors import UserError
from regress.facts.stack_keys import Fingerprint

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
    from regress.native.build import COMMANDS, OUT, BuildError, compiler_version

    recipe = COMMANDS[BACKENDS[backend].recipe_for(compile_only)]
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
        from regress.emu import EMU_VERSION

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
        raise UserError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    compiler, flags = _compiler_identity(backend, compile_only)
    keys.update(
        backend=backend,
        compiler=compiler,
        build_flags=" ".join([*flags, *(extra_flags or [])]),
        torch=_version_of("torch"),
        baseline_library=baseline,
        python=platform.python_version(),
    )
    diag["hostname"] = socket.gethostname()
    diag["os_kernel"] = platform.release()
    return Fingerprint(keys=keys, diagnostics=diag)


# ---- pins -------------------------------------------------------------------------------------
