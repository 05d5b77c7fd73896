"""Operating state of the device a measurement ran on: clocks, temperature, power (GPU), or the CPU
model and frequency. Recorded before and after timed work, stored beside results, never hashed.

Every query degrades to {} (or to fewer keys): a missing tool or an odd driver must never end a run.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

_TIMEOUT_S = 10
# Preferred query; older drivers lack some fields and then fail the whole query, so a minimal
# fallback follows.
_NVIDIA_FIELDS = (
    "name",
    "pstate",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "utilization.gpu",
    "memory.used",
    "clocks_throttle_reasons.active",
)
_NVIDIA_MINIMAL = ("name", "clocks.sm", "clocks.mem", "temperature.gpu", "power.draw")


def _run(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _visible_index(index: int, env: str) -> str:
    """The physical index behind a torch device index, when a *_VISIBLE_DEVICES list renumbers them."""
    visible = os.environ.get(env, "")
    ids = [x.strip() for x in visible.split(",") if x.strip()]
    return ids[index] if index < len(ids) else str(index)


def _nvidia_id(index: int) -> str:
    # The UUID names the same GPU whatever CUDA_VISIBLE_DEVICES says; fall back to the env mapping.
    import torch

    try:
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            text = str(uuid)
            return text if text.startswith("GPU-") else f"GPU-{text}"
    except Exception:
        pass
    return _visible_index(index, "CUDA_VISIBLE_DEVICES")


def nvidia_state(index: int = 0) -> dict[str, Any]:
    if shutil.which("nvidia-smi") is None:
        return {}
    ident = _nvidia_id(index)
    for fields in (_NVIDIA_FIELDS, _NVIDIA_MINIMAL):
        out = _run(
            [
                "nvidia-smi",
                f"--id={ident}",
                f"--query-gpu={','.join(fields)}",
                "--format=csv,noheader,nounits",
            ]
        )
        if out and out.strip():
            values = [v.strip() for v in out.strip().splitlines()[0].split(",")]
            if len(values) == len(fields):
                return {"tool": "nvidia-smi", **{f: _number(v) for f, v in zip(fields, values, strict=True)}}
    return {}


def rocm_state(index: int = 0) -> dict[str, Any]:
    if shutil.which("rocm-smi") is None:
        return {}
    ident = _visible_index(index, "HIP_VISIBLE_DEVICES")
    out = _run(["rocm-smi", "-d", ident, "--showtemp", "--showpower", "--showclocks", "--json"])
    if not out:
        return {}
    try:
        data = json.loads(out)
    except json.JSONDecodeError:
        return {}
    if not isinstance(data, dict):  # another tool version's shape: fewer keys, never a raise
        return {}
    cards = [v for k, v in data.items() if k.startswith("card") and isinstance(v, dict)]
    if not cards:
        return {}
    return {"tool": "rocm-smi", **{str(k): _number(str(v)) for k, v in cards[0].items()}}


def gpu_state(index: int = 0) -> dict[str, Any]:
    """Clocks, temperature and power of one GPU; {} where there is none or no tool answers."""
    return nvidia_state(index) or rocm_state(index)


def cpu_state() -> dict[str, Any]:
    """CPU model, current frequency and load: what a CPU timing depends on."""
    state: dict[str, Any] = {"machine": platform.machine(), "logical_cpus": os.cpu_count()}
    model, mhz = None, []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and model is None:
                model = value.strip()
            elif key == "cpu MHz":
                mhz.append(float(value))
    except (OSError, ValueError):
        pass
    state["model"] = model or platform.processor() or None
    if mhz:
        state["mhz_mean"] = round(sum(mhz) / len(mhz), 1)
        state["mhz_max"] = max(mhz)
    with contextlib.suppress(OSError):
        state["loadavg_1m"] = os.getloadavg()[0]
    import torch  # a dependency: a broken install fails here rather than dropping the field

    state["torch_threads"] = torch.get_num_threads()
    return state


def device_state(device: str, index: int | None = None) -> dict[str, Any]:
    """{"gpu": ...} on a GPU device, {"cpu": ...} on the CPU, stamped with the wall time."""
    stamp = {"time_unix": round(time.time(), 3)}
    if device == "cpu":
        return {**stamp, "cpu": cpu_state()}
    if index is None:
        import torch

        try:
            index = torch.cuda.current_device()
        except Exception:
            index = 0
    return {**stamp, "gpu": gpu_state(index)}
