"""Cases spread over several devices of one host: one worker process per GPU, merged into one run.

The parent owns the database; workers only compute and send CaseResults back over a queue, so a
dying worker can lose at most its in-flight case, never a stored one. On the CPU backend the same
code runs N worker processes (`--gpus 0,1`), which is how CI tests the sharding without a GPU.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UserError
from .results import CaseResult, CaseSpec

if TYPE_CHECKING:
    from .nightly import NightlyOptions, Progress
    from .suites.base import SuiteContext


def make_context(
    lib_path: Path, device: str, *, quick: bool, seed: int, iterations: int | None, log: Any = None
) -> SuiteContext:
    from .baselines import available_baselines
    from .kernel import load_library
    from .suites.base import SuiteContext

    ctx = SuiteContext(
        library=load_library(lib_path),
        device=device,
        baselines=available_baselines(device),
        quick=quick,
        seed=seed,
        iterations=iterations,
    )
    if log is not None:
        ctx.log = log
    return ctx


def parse_gpus(spec: str | None, device: str) -> list[int]:
    """'all' or '0,1,...' → device indices; None → [] (no sharding, run in this process)."""
    if not spec:
        return []
    if spec == "all":
        if device == "cpu":
            raise UserError("--gpus all needs a GPU; on the CPU backend name worker slots, e.g. --gpus 0,1")
        import torch

        count = torch.cuda.device_count()
        if count == 0:
            raise UserError("--gpus all: no GPU is visible")
        return list(range(count))
    try:
        indices = [int(part) for part in spec.split(",") if part.strip()]
    except ValueError as exc:
        raise UserError(f"--gpus {spec!r}: expected 'all' or comma-separated indices like 0,1") from exc
    if not indices or len(set(indices)) != len(indices) or min(indices) < 0:
        raise UserError(f"--gpus {spec!r}: indices must be distinct and >= 0")
    if device != "cpu":
        import torch

        count = torch.cuda.device_count()
        if max(indices) >= count:
            raise UserError(f"--gpus {spec!r}: only {count} GPU(s) visible")
    return indices


def case_cost(spec: CaseSpec) -> float:
    p = spec.params
    return float(p.get("b", 1) * p.get("h", 1) * p.get("sq", 1) * p.get("sk", 1)) * (
        10.0 if spec.suite in ("perf", "e2e") else 1.0
    )


def assign(plan: list[tuple[str, CaseSpec]], workers: list[int]) -> dict[int, list[tuple[str, CaseSpec]]]:
    """Longest-processing-time-first: each case to the least loaded worker, so shards end together.

    The assignment depends only on the plan, so a case lands on the same GPU every night.
    """
    loads = dict.fromkeys(workers, 0.0)
    shards: dict[int, list[tuple[str, CaseSpec]]] = {w: [] for w in workers}
    for item in sorted(plan, key=lambda it: (-case_cost(it[1]), it[0], it[1].name)):
        target = min(workers, key=lambda w: (loads[w], w))
        shards[target].append(item)
        loads[target] += case_cost(item[1])
    return shards


def _worker(
    index: int,
    device: str,
    lib_path: str,
    options: dict[str, Any],
    tasks: list[tuple[str, dict[str, Any]]],
    out: Any,
) -> None:
    if device != "cpu":
        # One GPU per worker, pinned before torch initialises CUDA in this process.
        os.environ["CUDA_VISIBLE_DEVICES" if not options.get("hip") else "HIP_VISIBLE_DEVICES"] = str(index)
    else:
        os.environ.setdefault("REGRESS_CPU_THREADS", "1")
    try:
        from .gpu_state import device_state
        from .nightly import run_one

        ctx = make_context(
            Path(lib_path),
            device,
            quick=options["quick"],
            seed=options["seed"],
            iterations=options["iterations"],
        )
        identity = {"worker": index, **_device_identity(device, index)}
        out.put(("state", index, {"before": device_state(device)}))
        for suite, spec_dict in tasks:
            spec = CaseSpec(**spec_dict)
            result = run_one(ctx, suite, spec)
            result.device = {**result.device, **identity}
            out.put(("result", index, result.to_dict()))
        out.put(("state", index, {"after": device_state(device)}))
    except BaseException as exc:
        out.put(("crash", index, f"{type(exc).__name__}: {exc}"))
    finally:
        out.put(("done", index, None))


def _device_identity(device: str, index: int) -> dict[str, Any]:
    """Which physical GPU this worker ran on: index, UUID and serial (nvidia-smi ignores
    CUDA_VISIBLE_DEVICES, so the physical index addresses it directly)."""
    if device == "cpu":
        return {"device": "cpu", "gpu_index": None}
    import subprocess

    import torch

    identity: dict[str, Any] = {
        "device": device,
        "gpu_index": index,
        "gpu_name": torch.cuda.get_device_name(0),
    }
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid,serial", "--format=csv,noheader", "-i", str(index)],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        if out:
            uuid, serial = (part.strip() for part in out.split(",", 1))
            identity.update(gpu_uuid=uuid, gpu_serial=serial)
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    if "gpu_uuid" not in identity:  # ROCm, or no nvidia-smi: torch still knows the UUID
        uuid_attr = getattr(torch.cuda.get_device_properties(0), "uuid", None)
        identity["gpu_uuid"] = str(uuid_attr) if uuid_attr is not None else None
    return identity


def run_sharded(
    opts: NightlyOptions,
    lib_path: Path,
    device: str,
    workers: list[int],
    progress: Progress | None,
    states: dict[str, Any] | None = None,
) -> Iterator[CaseResult]:
    """Yields results from all workers as they arrive (the caller stores each at once).

    `states` receives each worker's device state before and after, keyed "worker<index>".
    """
    from .suites import get_suite

    # Case lists depend on the device kind only, not on which GPU: plan without loading a library.
    probe = _planning_context(lib_path, device, opts)
    plan = [(name, spec) for name in opts.suites for spec in get_suite(name).cases(probe)]
    shards = assign(plan, workers)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    options = {"quick": opts.quick, "seed": opts.seed, "iterations": opts.iterations, "hip": False}
    procs = []
    for index, items in shards.items():
        tasks = [
            (suite, {"suite": s.suite, "name": s.name, "params": s.params, "kernel": s.kernel})
            for suite, s in items
        ]
        proc = ctx.Process(
            target=_worker, args=(index, device, str(lib_path), options, tasks, out), daemon=True
        )
        proc.start()
        procs.append(proc)
    total, done, running = len(plan), 0, len(procs)
    crashes: list[str] = []
    try:
        while running:
            try:
                kind, index, payload = out.get(timeout=5)
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs):
                    break
                continue
            if kind == "result":
                result = CaseResult.from_dict(payload)
                done += 1
                if progress:
                    progress(f"gpu{index} {result.case.suite}: {result.case.name}", done, total, result)
                yield result
            elif kind == "state" and states is not None:
                states.setdefault(f"worker{index}", {}).update(payload)
            elif kind == "crash":
                crashes.append(f"worker {index}: {payload}")
            elif kind == "done":
                running -= 1
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
    if crashes or done < total:
        raise RuntimeError(
            f"sharded run lost {total - done} of {total} cases; {'; '.join(crashes) or 'worker died'}"
        )


def _planning_context(lib_path: Path, device: str, opts: NightlyOptions) -> Any:
    """A context that only lists cases: no library is loaded, so the parent never touches a GPU."""
    from .suites.base import SuiteContext

    class _Unloaded:
        backend = "cuda"
        path = lib_path

    return SuiteContext(
        library=_Unloaded(),
        device=device,
        quick=opts.quick,
        seed=opts.seed,  # type: ignore[arg-type]
        iterations=opts.iterations,
    )
