"""How values look on the pages: the jinja environment, its filters and JSON safe inside <script>."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from regress.facts.metrics import describe_change


def fmt_num(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"  # jinja's `is number` holds for bools: never "False"
    if not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e7:
        return str(int(value))  # counts stored as floats (distinct hashes): 1, not 1.000
    mag = math.floor(math.log10(abs(value)))
    if mag < -3 or mag >= 7:  # p-values like 1e-40, huge counts: scientific, not 40 zeros
        return f"{value:.{max(0, digits - 2)}e}"
    text = f"{value:.{max(0, digits - 1 - mag)}f}"
    return text.rstrip("0").rstrip(".") if mag < 0 else text


def fmt_show(value: Any) -> str:
    """Any report value as text: a pair as "old → new", other lists joined, dicts as JSON; numbers
    as `fmt_num`, so no Python repr (`False`, `None`, `0.9999999999999999`) reaches a page."""
    if isinstance(value, list | tuple):
        return (" → " if len(value) == 2 else ", ").join(map(fmt_show, value))
    if isinstance(value, dict):
        return json.dumps(value, default=str)
    if value is None or isinstance(value, int | float):
        return fmt_num(value)
    return str(value)


def fmt_pct(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value * 100:+.1f}%"


def fmt_ratio(value: Any) -> str:
    """A speedup: three decimals and ×, so 1.5552 reads 1.555×, not 1.56×."""
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        return ""
    return f"{value:.3f}×"


def fmt_change(regression: Any) -> str:
    """A regression's change with its unit (metrics.describe_change), "–" when it has none; the
    pages hold regressions as dicts, other callers as rows."""

    def get(name: str) -> Any:
        return regression.get(name) if isinstance(regression, dict) else getattr(regression, name, None)

    magnitude = get("magnitude")
    if not isinstance(magnitude, int | float) or isinstance(magnitude, bool):
        return "–"
    return describe_change(str(get("kind")), str(get("metric")), float(magnitude)) or "–"


def fmt_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "–"


def fmt_date(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d") if value else "–"


def make_env(templates: Path) -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(templates)),
        autoescape=True,  # every page, the Atom feed too: names come from uploads
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=StrictUndefined,
    )
    # Compact JSON in <script type="application/json">; jinja's tojson escapes <, >, & and '.
    env.policies["json.dumps_function"] = _tojson_dumps  # never `Infinity`, which JSON.parse refuses
    env.policies["json.dumps_kwargs"] = {"separators": (",", ":"), "sort_keys": False}
    env.filters.update(
        hostrows=host_rows,
        ratio=fmt_ratio,
        num=fmt_num,
        pct=fmt_pct,
        time=fmt_time,
        date=fmt_date,
        show=fmt_show,
        change=fmt_change,
    )
    return env


def finite_json(value: Any) -> str:
    """Compact JSON that JSON.parse accepts: a non-finite float (stored before the bundle's range,
    or a reader's overflow) becomes null instead of `Infinity`, which made a whole chart vanish."""
    try:
        return json.dumps(value, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:
        return json.dumps(_nulled(value), separators=(",", ":"), default=str)


def _tojson_dumps(value: Any, **kwargs: Any) -> str:
    try:
        return json.dumps(value, **kwargs, allow_nan=False)
    except ValueError:
        return json.dumps(_nulled(value), **kwargs)


def _nulled(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _nulled(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nulled(v) for v in value]
    return value


def script_json(blob: str) -> Markup:
    """JSON text made safe inside <script> (as jinja's tojson: no "</script>", no "<!--")."""
    return Markup(
        blob.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027")
    )


def epoch(dt: datetime) -> int:
    return int(dt.replace(tzinfo=UTC).timestamp())


def clean(values: np.ndarray, decimals: int = 5) -> list[float | None]:
    return [None if v != v else v for v in np.round(values, decimals).tolist()]


# --- device state (what gpu_state.device_state recorded) as text a person reads -------------------

# nvidia-smi's clocks_throttle_reasons.active bits (nvml.h, nvmlClocksEventReasons).
THROTTLE_BITS = {
    0x1: "idle",
    0x2: "app clock setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal",
    0x40: "HW thermal",
    0x80: "power brake",
    0x100: "display clock",
}


def _mhz(value: Any) -> float | None:
    """A clock as a number: nvidia-smi gives 1980.0, rocm-smi "(1980Mhz)"."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    digits = "".join(ch for ch in str(value) if ch.isdigit() or ch == ".")
    try:
        return float(digits)
    except ValueError:
        return None


def _pick(state: dict[str, Any], *, exact: tuple[str, ...], contains: tuple[str, ...] = ()) -> Any:
    for k in exact:
        if k in state:
            return state[k]
    for k, v in state.items():
        low = k.lower()
        if any(c in low for c in contains) and "limit" not in low and "max" not in low:
            return v
    return None


def throttle_text(value: Any) -> str:
    try:
        bits = int(str(value), 16) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        return str(value)
    if bits == 0:
        return "none"
    return ", ".join(name for bit, name in THROTTLE_BITS.items() if bits & bit) or hex(bits)


def describe_device(snapshot: Any) -> str:
    """One snapshot ({"gpu": {...}, "time_unix": t} or {"cpu": {...}}) as a line: clocks,
    temperature, power, utilisation, throttling and the wall time it was taken."""
    if not isinstance(snapshot, dict) or not snapshot:
        return ""
    gpu, cpu = snapshot.get("gpu"), snapshot.get("cpu")
    parts: list[str] = []
    if isinstance(cpu, dict) and cpu and not gpu:
        if cpu.get("model"):
            parts.append(str(cpu["model"]))
        if isinstance(cpu.get("mhz_mean"), int | float):
            parts.append(f"{cpu['mhz_mean']:.0f} MHz mean")
        if isinstance(cpu.get("loadavg_1m"), int | float):
            parts.append(f"load {cpu['loadavg_1m']:.2f}")
    else:
        state = gpu if isinstance(gpu, dict) else snapshot  # flat snapshots of older writers
        sm = _mhz(_pick(state, exact=("clocks.sm", "sclk_mhz"), contains=("sclk",)))
        sm_max = _mhz(state.get("clocks.max.sm"))
        mem = _mhz(_pick(state, exact=("clocks.mem", "mclk_mhz"), contains=("mclk",)))
        temp = _mhz(_pick(state, exact=("temperature.gpu", "temp_c"), contains=("temperature", "temp")))
        power = _mhz(_pick(state, exact=("power.draw", "power_w"), contains=("power",)))
        limit = _mhz(state.get("power.limit"))
        util = state.get("utilization.gpu")
        if sm is not None:
            parts.append(f"SM {sm:.0f} MHz" + (f" of {sm_max:.0f}" if sm_max else ""))
        if mem is not None:
            parts.append(f"mem {mem:.0f} MHz")
        if temp is not None:
            parts.append(f"{temp:.0f} °C")
        if power is not None:
            parts.append(f"{power:.0f} W" + (f" of {limit:.0f}" if limit else ""))
        if isinstance(util, int | float):
            parts.append(f"util {util:.0f} %")
        if state.get("pstate"):
            parts.append(str(state["pstate"]))
        if "clocks_throttle_reasons.active" in state:
            parts.append("throttle: " + throttle_text(state["clocks_throttle_reasons.active"]))
    stamp = snapshot.get("time_unix")
    if isinstance(stamp, int | float):
        try:
            parts.append("at " + datetime.fromtimestamp(stamp, UTC).strftime("%H:%M:%S UTC"))
        except (OverflowError, OSError, ValueError):  # a stored row from before the bundle's range
            parts.append(f"at t={stamp:g}")
    return " · ".join(parts)


def device_rows(gpu_state: Any) -> list[dict[str, str]]:
    """A run's gpu_state as rows {who, before, after}: the run as a whole, then each worker of a
    sharded run (shard.py stores them under "workers")."""
    if not isinstance(gpu_state, dict):
        return []
    rows = []
    if "before" in gpu_state or "after" in gpu_state:
        rows.append(
            {
                "who": "parent process" if gpu_state.get("workers") else "device",
                "before": describe_device(gpu_state.get("before")),
                "after": describe_device(gpu_state.get("after")),
            }
        )
    workers = gpu_state.get("workers")
    if isinstance(workers, dict):
        for name, snaps in sorted(workers.items()):
            if isinstance(snaps, dict):
                who = str(name).replace("worker", "worker ", 1) if str(name)[6:].isdigit() else str(name)
                rows.append(
                    {
                        "who": who,
                        "before": describe_device(snaps.get("before")),
                        "after": describe_device(snaps.get("after")),
                    }
                )
    return rows


def host_rows(host: Any) -> list[tuple[str, str]]:
    """A run's host record as (label, text): the fingerprint's per-GPU diagnostics one line per GPU
    (index, UUID, serial, clock, temperature), lists joined, anything else as it is."""
    if not isinstance(host, dict):
        return []
    rows: list[tuple[str, str]] = []
    for key, value in host.items():
        if key == "fingerprint_diagnostics" and isinstance(value, dict):
            gpus = value.get("gpus")
            for gpu in gpus if isinstance(gpus, list) else []:  # stored JSON of any shape must render
                if isinstance(gpu, dict):
                    temp = f"{gpu['temperature']} °C" if gpu.get("temperature") not in (None, "") else ""
                    parts = [
                        gpu.get("uuid"),
                        f"serial {gpu['serial']}" if gpu.get("serial") else "",
                        gpu.get("clock_sm"),
                        temp,
                    ]
                    rows.append((f"GPU {gpu.get('index', '?')}", " · ".join(str(p) for p in parts if p)))
            shown = "gpus" if isinstance(gpus, list) else None  # an odd "gpus" is shown as it is
            rest = {k: v for k, v in value.items() if k != shown and k not in host}
            rows += [(f"host {k}", fmt_show(v)) for k, v in rest.items()]
        elif isinstance(value, list):
            rows.append((f"host {key}", "\n".join(map(str, value))))
        else:
            rows.append((f"host {key}", fmt_show(value)))
    return rows
