"""The worker pool: every case runs in a worker process, under a watchdog, on one device each.

One worker per GPU (`--gpus 0,1` or `all`), or one worker on the default device when no GPUs are
named, so a one-GPU `--gpus all` and a plain run are the same code and cost the same. On the CPU
backend `--gpus 0,1` names worker slots, which is how CI tests the pool without a GPU.

- Workers start before the kernel is built (interpreter, torch, device context and thread pools
  overlap the build) and stay warm for the whole run; each gets an equal share of the CPU cores.
- Cases are dealt one unit at a time to whichever worker is free, longest first by the cost the
  same stack measured in earlier runs. A unit is the cases that share work: the ULP cases of one
  shape and input share one fp64 reference, so they go to one worker together.
- Each case has a time limit from its own expected time (regress.run.runner.time_limit). A case past
  its limit is recorded as 'timeout' with its evidence (the step it was in and every thread's
  Python stack, dumped by faulthandler), its worker is killed and replaced, and the run goes on. A
  worker that dies mid-case gets an 'error' result for that case and is replaced the same way.
- The run always ends, with a status for every case and no exception. A loss during a case records
  that case, so replacing such workers without limit still ends; what bounds them is the device
  answering: a worker is ready only after a probe on its device, and a worker that dies or does not
  answer within `ready_limit_s` before it is ready marks its device unhealthy (no replacement; its
  cases go to the other devices, or, when none is left, are recorded 'skip' with that reason).
  After a GPU's first loss the pool keeps a spare worker started ahead, so the next loss costs no
  cold start (import, device context, library: ~5 s on the H200). Not on the CPU backend, where
  a start-up is CPU work that would slow the cases running beside it.
  Losses between cases cost no case, so only MAX_IDLE_LOSSES of them are replaced per device. At
  the run's deadline the cases in flight are stopped and every case left is recorded 'skip'; a
  cancellation (`cancelled`, a signal to the parent) ends the run the same way, with its reason.
- The books of a run (`Schedule`: the units, the queue, which cases are still owed) are kept apart
  from the processes and tested without them (tests/test_shard_schedule.py); `_Run` deals units,
  handles the workers' messages and runs the watchdog, one method a step.
- The parent owns the database; workers only compute and send results back, so a dying worker can
  lose at most its in-flight case, never a stored one. Results are yielded as they arrive. Each
  worker writes to its own pipe: a shared queue's lock, held by a worker killed mid-send, would
  stall every other worker.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing as mp
import os
import queue as queue_mod
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_any
from pathlib import Path
from typing import Any

from regress.facts.errors import UserError
from regress.facts.results import CaseResult, CaseSpec
from regress.facts.suite_facts import is_timed

from .runner import CaseOptions, make_context, run_one, time_limit

Progress = Callable[[str, int, int, CaseResult | None], None]
Item = tuple[str, CaseSpec]

POLL_S = 0.25  # how often the parent checks the watchdog while no message arrives
# A worker lost between cases costs no case, so its replacement makes no progress: per device, this
# many are replaced, then the device is declared unhealthy (a loss during a case is always replaced).
MAX_IDLE_LOSSES = 4
# From the library being ready (or the worker's spawn, if later) to the worker's 'ready': import,
# device context, library load and the device probe. A fresh H200 worker needs ~5 s, a CPU one
# on a loaded 2-core VM ~20 s; a device that does not answer in this long is unhealthy.
READY_LIMIT_S = 180.0
EVIDENCE_CHARS = 4000
DEADLINE = "deadline"  # the reason a case is skipped when the run's deadline passed


def parse_gpus(spec: str | None, device: str) -> list[int]:
    """'all' or '0,1,...' → device indices; None → [] (one worker on the default device)."""
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


# --- planning -------------------------------------------------------------------------------------


def case_cost(spec: CaseSpec) -> float:
    """A first run's guess of a case's cost (no measurement yet): the attention work, perf-like suites
    weighted for their many timed iterations."""
    p = spec.params
    return float(p.get("b", 1) * p.get("h", 1) * p.get("sq", 1) * p.get("sk", 1)) * (
        10.0 if is_timed(spec.suite) else 1.0
    )


def affinity(item: Item) -> tuple[Any, ...]:
    """Cases with the same affinity share work in a worker, so they run together, in plan order."""
    suite, spec = item
    if suite == "ulp":  # one fp64 reference per (shape, input), whatever the layout and mode
        p = spec.params
        return (suite, p.get("b"), p.get("h"), p.get("sq"), p.get("sk"), p.get("d"), p.get("input"))
    return (suite, spec.key)


@dataclass
class Unit:
    items: list[Item]
    cost: float


def make_units(plan: list[Item], measured: dict[str, float]) -> list[Unit]:
    """The plan grouped by affinity, longest first. Costs are the measured seconds when every case
    has one; otherwise the first-run guess for all (the two are not in the same units)."""
    use_measured = bool(measured) and all(spec.key in measured for _, spec in plan)
    groups: dict[tuple[Any, ...], list[Item]] = {}
    for item in plan:
        groups.setdefault(affinity(item), []).append(item)

    def cost(spec: CaseSpec) -> float:
        return measured[spec.key] if use_measured else case_cost(spec)

    units = [Unit(items, sum(cost(s) for _, s in items)) for items in groups.values()]
    units.sort(key=lambda u: (-u.cost, u.items[0][0], u.items[0][1].name))
    return units


def predict_wall(costs: list[float], workers: int) -> float:
    """Makespan of longest-first list scheduling of `costs` (seconds) over `workers` workers."""
    loads = [0.0] * max(1, workers)
    for c in sorted(costs, reverse=True):
        i = loads.index(min(loads))
        loads[i] += c
    return max(loads)


# --- the worker process ---------------------------------------------------------------------------


def _pin_device(device: str, gpu: int | None) -> None:
    """One GPU per worker, pinned before torch initialises the device in this process."""
    if device == "cpu" or gpu is None:
        return
    var = "CUDA_VISIBLE_DEVICES"
    visible = os.environ.get(var) or os.environ.get("HIP_VISIBLE_DEVICES")
    physical = visible.split(",")[gpu] if visible else str(gpu)
    os.environ[var] = physical
    os.environ["HIP_VISIBLE_DEVICES"] = physical


def _worker_main(
    wid: int,
    slot: int,
    gpu: int | None,
    device: str,
    threads: int,
    options: CaseOptions,
    inbox: Any,
    out: Any,  # this worker's own pipe: a worker killed mid-send can break only its own channel
    evidence_path: str,
    spawned_at: float,
    identify: bool,
) -> None:
    marks: dict[str, float] = {"spawn_s": round(time.time() - spawned_at, 3)}
    parent = os.getppid()
    # A terminal's Ctrl-C and a CI's cancel reach the whole process group: the parent decides how
    # the run ends (it stops its workers itself), so a worker must not die mid-case of the signal.
    for stop_signal in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop_signal, signal.SIG_IGN)
    evidence = open(evidence_path, "w")  # noqa: SIM115 - lives as long as the process
    faulthandler.register(signal.SIGUSR1, file=evidence, all_threads=True)
    _pin_device(device, gpu)
    os.environ.setdefault("REGRESS_CPU_THREADS", str(threads))
    if device == "cpu":
        # Before torch loads OpenMP: idle OpenMP threads sleep instead of spinning ~2 ms after each
        # call on the core the next timed call needs (regress/run/suites/perf.py).
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    try:
        t0 = time.perf_counter()
        import torch

        # An equal share of the cores: two workers with a full pool each fight over every core.
        torch.set_num_threads(threads)
        marks["import_s"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        if device != "cpu":
            torch.zeros(1, device="cuda")  # the device context, made while the kernel builds
        marks["device_s"] = round(time.perf_counter() - t0, 3)
        out.send(("up", wid, None))
        kind, payload = _next_message(inbox, parent)
        if kind != "library":
            return
        waited = time.perf_counter()
        from regress.machine.gpu_state import device_state

        t0 = time.perf_counter()
        ctx = make_context(Path(payload), device, options)
        marks["context_s"] = round(time.perf_counter() - t0, 3)
        identity = {"worker": slot, **_device_identity(device, gpu)}
        _probe_device(device)
        before = device_state(device)
        marks["ready_after_library_s"] = round(time.perf_counter() - waited, 3)
        out.send(("ready", wid, {"startup": marks, "before": before, "identity": identity}))
        while True:
            kind, payload = _next_message(inbox, parent)
            if kind != "unit":
                break
            unit_id, items = payload
            for i, (suite, spec_dict) in enumerate(items):
                spec = CaseSpec(**spec_dict)
                out.send(("start", wid, (unit_id, i)))
                result = run_one(ctx, suite, spec, on_phase=lambda name: out.send(("phase", wid, name)))
                if identify:  # sharded: which worker and GPU, for per-GPU agreement
                    result.device = {**result.device, **identity}
                out.send(("result", wid, (unit_id, i, result.to_dict())))
        out.send(("state", wid, {"after": device_state(device)}))
    except BaseException as exc:
        with contextlib.suppress(OSError):
            out.send(("crash", wid, f"{type(exc).__name__}: {exc}"))


def _probe_device(device: str) -> None:
    """A worker is ready only once its device has answered: a small computation, synchronised (after
    a hung kernel is killed, a device that no longer answers blocks or raises here)."""
    if device == "cpu":
        return
    import torch

    if float(torch.ones(256, device="cuda").sum().item()) != 256.0:
        raise RuntimeError("device probe: 256 ones did not sum to 256")
    torch.cuda.synchronize()


def _next_message(inbox: Any, parent: int) -> tuple[str, Any]:
    """The next order from the parent; ('stop', None) if the parent is gone (killed with -9)."""
    while True:
        try:
            return inbox.get(timeout=2)  # type: ignore[no-any-return]
        except queue_mod.Empty:
            if os.getppid() != parent:
                return ("stop", None)


def _device_identity(device: str, gpu: int | None) -> dict[str, Any]:
    """Which physical GPU this worker ran on: index, UUID and serial (nvidia-smi ignores
    CUDA_VISIBLE_DEVICES, so the physical index addresses it directly)."""
    if device == "cpu":
        return {"device": "cpu", "gpu_index": None}
    import subprocess

    import torch

    identity: dict[str, Any] = {
        "device": device,
        "gpu_index": gpu if gpu is not None else torch.cuda.current_device(),
        "gpu_name": torch.cuda.get_device_name(0),
    }
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=uuid,serial",
                "--format=csv,noheader",
                "-i",
                str(identity["gpu_index"]),
            ],
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


# --- the parent's side ----------------------------------------------------------------------------


@dataclass
class _Current:
    unit_id: int
    index: int
    started: float
    limit: float
    phase: str = "start"
    phase_at: float = 0.0


@dataclass
class _Worker:
    wid: int  # unique per process: a replaced worker's late messages are told apart
    slot: int
    gpu: int | None
    proc: Any
    inbox: Any
    reader: Any  # the worker's messages; EOF once it is gone
    evidence: Path
    spawned: float
    ready: bool = False
    spare: bool = False  # started ahead, to replace the slot's next lost worker without a cold start
    eof: bool = False
    outstanding: deque[int] = field(default_factory=deque)  # unit ids sent, oldest first
    current: _Current | None = None


@dataclass
class PoolStats:
    """What the pool measured about itself: goes into the run's summary under "timing"."""

    startup_s: dict[str, float] = field(default_factory=dict)
    startup_split: dict[str, dict[str, float]] = field(default_factory=dict)
    # What start-up cost the run: from the kernel being ready to the worker being ready.
    startup_wait_s: dict[str, float] = field(default_factory=dict)
    timeouts: int = 0
    crashes: int = 0
    replaced: int = 0
    scheduled_by: str = ""
    unhealthy: dict[str, str] = field(default_factory=dict)  # worker slot → why its device was given up
    skipped: dict[str, int] = field(default_factory=dict)  # cases the pool did not run, by reason
    deadline_reached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "startup_s": self.startup_s,
            "startup_split": self.startup_split,
            "startup_wait_s": self.startup_wait_s,
            "timeouts": self.timeouts,
            "crashes": self.crashes,
            "replaced": self.replaced,
            "scheduled_by": self.scheduled_by,
            "unhealthy": self.unhealthy,
            "not_run": self.skipped,
            "deadline_reached": self.deadline_reached,
        }


class Schedule:
    """The books of one run, kept without processes: the plan's units, the queue of those not yet
    dealt, and, per unit, the cases not yet recorded. Every case is recorded exactly once: by a
    worker's result, or by the pool (a case lost with its worker, one skipped)."""

    def __init__(self, plan: list[Item], measured: dict[str, float]) -> None:
        units = make_units(plan, measured)
        self.by_measured = bool(units) and bool(measured) and all(s.key in measured for _, s in plan)
        self.table: dict[int, list[Item]] = {i: u.items for i, u in enumerate(units)}
        self.pending: deque[int] = deque(range(len(units)))
        self.left: dict[int, set[int]] = {i: set(range(len(items))) for i, items in self.table.items()}
        self.total = len(plan)

    def deal(self) -> tuple[int, list[Item]] | None:
        """The next unit (longest first; a requeued rest goes before the others), or None."""
        if not self.pending:
            return None
        uid = self.pending.popleft()
        return uid, self.table[uid]

    def spec(self, uid: int, index: int) -> CaseSpec:
        return self.table[uid][index][1]

    def is_open(self, uid: int, index: int) -> bool:
        return index in self.left[uid]

    def close(self, uid: int, index: int) -> bool:
        """Takes a case off the books; False when it was already recorded (a lost worker's late
        message)."""
        if index not in self.left[uid]:
            return False
        self.left[uid].discard(index)
        return True

    def unit_done(self, uid: int) -> bool:
        return not self.left[uid]

    def requeue(self, uids: Iterable[int]) -> None:
        """The cases of `uids` (a lost worker's units, oldest first) not yet recorded go back to the
        front of the queue as new units, in their order."""
        for uid in reversed(list(uids)):
            rest = sorted(self.left[uid])
            if not rest:
                continue
            new_id = len(self.table)
            self.table[new_id] = [self.table[uid][i] for i in rest]
            self.left[new_id] = set(range(len(rest)))
            self.left[uid] = set()
            self.pending.appendleft(new_id)

    def close_the_rest(self) -> list[CaseSpec]:
        """Every case not yet recorded, in unit order, taken off the books; nothing is left to deal."""
        rest = []
        for uid in sorted(self.left):
            rest += [self.table[uid][i][1] for i in sorted(self.left[uid])]
            self.left[uid] = set()
        self.pending.clear()
        return rest


class WorkerPool:
    """Started early (`start`), told the library once built (`load`), then `run` yields results."""

    def __init__(
        self,
        device: str,
        gpus: list[int],
        options: CaseOptions,
        *,
        time_limit_floor_s: float,
        identify: bool,
        ready_limit_s: float = READY_LIMIT_S,
    ) -> None:
        self.device = device
        self.ready_limit_s = ready_limit_s
        self.slots: list[tuple[int, int | None]] = [(g, g) for g in gpus] or [(0, None)]
        self.options = options
        self.floor_s = time_limit_floor_s
        self.identify = identify  # sharded runs tag each result with its worker and GPU
        self.states: dict[str, Any] = {}
        self.stats = PoolStats()
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.threads = max(1, cores // len(self.slots))
        self._mp = mp.get_context("spawn")
        self._dir = Path(tempfile.mkdtemp(prefix="regress-workers-"))
        self._workers: dict[int, _Worker] = {}  # by wid
        self._wids = 0
        self._library: str | None = None
        self._idle_losses: dict[int, int] = {}  # per slot: workers lost between cases
        self._lost_in_a_row: dict[int, int] = {}  # per slot: workers lost since its last result
        self._closed = False
        self._loaded_at = 0.0

    # lifecycle

    def start(self) -> None:
        for slot, gpu in self.slots:
            self._spawn(slot, gpu)

    def load(self, lib_path: Path) -> None:
        self._library = str(lib_path)
        self._loaded_at = time.monotonic()
        for w in self._workers.values():
            w.inbox.put(("library", self._library))

    def close(self) -> None:
        """Stops every worker (idempotent); their after-states land in `states`."""
        if self._closed:
            return
        self._closed = True
        for w in self._workers.values():
            if w.proc.is_alive():
                w.inbox.put(("stop", None))
        deadline = time.monotonic() + 10
        for w in self._workers.values():
            w.proc.join(timeout=max(0.1, deadline - time.monotonic()))
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(timeout=5)
        self._drain_states()
        shutil.rmtree(self._dir, ignore_errors=True)

    def kill(self) -> None:
        """Ends every worker at once (a second stop signal: no after-states, no waiting)."""
        self._closed = True
        for w in self._workers.values():
            if w.proc.is_alive():
                w.proc.kill()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _spawn(self, slot: int, gpu: int | None, *, spare: bool = False) -> _Worker:
        inbox = self._mp.Queue()
        reader, writer = self._mp.Pipe(duplex=False)
        self._wids += 1
        wid = self._wids
        evidence = self._dir / f"worker{slot}-{wid}.txt"
        spawned = time.time()
        proc = self._mp.Process(
            target=_worker_main,
            args=(
                wid,
                slot,
                gpu,
                self.device,
                self.threads,
                self.options,
                inbox,
                writer,
                str(evidence),
                spawned,
                self.identify,
            ),
            daemon=True,
            name=f"regress-worker{slot}",
        )
        proc.start()
        writer.close()  # the worker holds the only write end, so its death reads as EOF here
        worker = _Worker(wid, slot, gpu, proc, inbox, reader, evidence, time.monotonic(), spare=spare)
        self._workers[wid] = worker
        if self._library is not None:
            inbox.put(("library", self._library))
        return worker

    def _drain_states(self) -> None:
        for w in self._workers.values():
            with contextlib.suppress(EOFError, OSError):
                while w.reader.poll():
                    kind, _wid, payload = w.reader.recv()
                    if kind == "state" and self.identify:
                        self.states.setdefault(f"worker{w.slot}", {}).update(payload)
            w.reader.close()

    def _forget(self, w: _Worker) -> None:
        del self._workers[w.wid]
        w.reader.close()

    def _receive(self, timeout: float) -> list[tuple[str, int, Any]]:
        """Every message waiting from any worker (after up to `timeout` s of waiting for one)."""
        readers = {w.reader: w for w in self._workers.values() if not w.eof}
        messages: list[tuple[str, int, Any]] = []
        conn: Any
        for conn in wait_any(list(readers), timeout=timeout):
            try:
                while conn.poll():
                    messages.append(conn.recv())
            except (EOFError, OSError):  # the worker is gone; the watchdog sees its process end
                readers[conn].eof = True
        return messages

    # running

    def run(
        self,
        plan: list[Item],
        measured: dict[str, float],
        progress: Progress | None,
        deadline: float | None = None,
        cancelled: Callable[[], str | None] | None = None,
    ) -> Iterator[CaseResult]:
        """Yields one result for every case of the plan (pass, fail, error, timeout or skip) as it
        arrives; a lost worker or device never raises. `deadline` (a time.monotonic() value): the
        cases in flight then are stopped and the rest are not started, all recorded 'skip'.
        `cancelled`: asked every poll; a reason ("cancelled by SIGTERM") ends the run the same way."""
        yield from _Run(self, plan, measured, progress, deadline, cancelled).results()

    @staticmethod
    def _where(w: _Worker) -> str:
        return f"GPU {w.gpu}" if w.gpu is not None else f"worker {w.slot}"

    def _timeout_message(self, w: _Worker, cur: _Current) -> str:
        """The evidence of a hang: the step it was in, for how long, and every thread's stack."""
        in_phase = time.monotonic() - cur.phase_at
        with contextlib.suppress(OSError):
            os.kill(w.proc.pid, signal.SIGUSR1)  # faulthandler dumps every thread's stack
        stacks, deadline = "", time.monotonic() + 3
        while time.monotonic() < deadline:  # until the dump is written and stops growing
            time.sleep(0.2)
            try:
                now = w.evidence.read_text(errors="replace")
            except OSError:
                continue
            if now and now == stacks:
                break
            stacks = now
        return (
            f"timeout: no result after {time.monotonic() - cur.started:.1f} s "
            f"(limit {cur.limit:.1f} s) on {self._where(w)}; "
            f"last step: {cur.phase} (for {in_phase:.1f} s); worker killed and replaced.\n"
            f"{stacks.strip()[-EVIDENCE_CHARS:]}"
        )


class _Run:
    """One `WorkerPool.run`: the schedule's units dealt to the pool's workers, their messages handled,
    the watchdog, and the deadline's or a cancellation's end. Results the pool records itself (a lost
    case, a skip) and workers' results are yielded in the order they are recorded."""

    def __init__(
        self,
        pool: WorkerPool,
        plan: list[Item],
        measured: dict[str, float],
        progress: Progress | None,
        deadline: float | None,
        cancelled: Callable[[], str | None] | None,
    ) -> None:
        self.pool = pool
        self.books = Schedule(plan, measured)
        pool.stats.scheduled_by = "measured" if self.books.by_measured else "estimate"
        self.measured = measured
        self.progress = progress
        self.deadline = deadline
        self.cancelled = cancelled
        self.outbox: deque[tuple[str, CaseResult]] = deque()  # recorded this round, yielded together
        self.backlog: deque[tuple[str, int, Any]] = deque()
        self.ended = False  # every case left was recorded 'skip': nothing more can arrive

    # the loop

    def results(self) -> Iterator[CaseResult]:
        done = 0
        while done < self.books.total and not self.ended:
            self.step()
            for label, result in self.outbox:
                done += 1
                if self.progress:
                    self.progress(label, done, self.books.total, result)
                yield result
            self.outbox.clear()

    def step(self) -> None:
        """One poll: the end of the run if it is due, else one message handled and the watchdog."""
        pool = self.pool
        why = self.cancelled() if self.cancelled is not None else None
        if why:
            self.end_now(why, "the run was cancelled")
        elif self.deadline is not None and time.monotonic() >= self.deadline:
            pool.stats.deadline_reached = True
            self.end_now(DEADLINE, "the run's deadline passed")
        elif not pool._workers:  # every device was given up
            self.skip_the_rest("unhealthy: " + ("; ".join(pool.stats.unhealthy.values()) or "no worker left"))
        else:
            if not self.backlog:
                self.backlog.extend(pool._receive(POLL_S))
            if self.backlog:
                self.handle(*self.backlog.popleft())
            self.watchdog()

    # recording and dealing

    def record(self, w: _Worker | None, spec: CaseSpec, status: str, message: str, **metrics: float) -> None:
        """A result the pool writes itself: a case lost with its worker, or one it did not run."""
        where = {"worker": w.slot, "gpu_index": w.gpu} if w is not None and self.pool.identify else {}
        lost = CaseResult(case=spec, status=status, metrics=metrics, message=message, device=where)  # type: ignore[arg-type]
        self.outbox.append((f"{status} {spec.suite}: {spec.name}", lost))
        if status == "skip":
            reason = message.split(":", 1)[0]
            skipped = self.pool.stats.skipped
            skipped[reason] = skipped.get(reason, 0) + 1

    def dispatch(self, w: _Worker) -> None:
        """One unit at a time: the free worker takes the next. A spare waits until it replaces one."""
        while w.ready and not w.spare and not w.outstanding:
            dealt = self.books.deal()
            if dealt is None:
                return
            uid, items = dealt
            w.outstanding.append(uid)
            wire = [
                (suite, {"suite": s.suite, "name": s.name, "params": s.params, "kernel": s.kernel})
                for suite, s in items
            ]
            w.inbox.put(("unit", (uid, wire)))

    def in_flight(self, w: _Worker) -> tuple[CaseSpec, _Current] | None:
        """The case the worker is in, taken off the books (its caller records it)."""
        cur = w.current
        if cur is None or not self.books.close(cur.unit_id, cur.index):
            return None
        return self.books.spec(cur.unit_id, cur.index), cur

    def skip_the_rest(self, message: str) -> None:
        for spec in self.books.close_the_rest():
            self.record(None, spec, "skip", message)
        self.ended = True

    # losing workers

    def stop(self, w: _Worker) -> None:
        self.books.requeue(w.outstanding)
        w.outstanding.clear()
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(timeout=10)
        self.pool._forget(w)

    def lose(self, w: _Worker, status: str, message: str) -> None:
        """Records the in-flight case of a hung or dead worker and starts its replacement."""
        pool = self.pool
        case = self.in_flight(w)
        if case is not None:
            spec, cur = case
            elapsed = round(time.monotonic() - cur.started, 3)
            self.record(w, spec, status, message, wall_s=elapsed, time_limit_s=round(cur.limit, 3))
        self.stop(w)
        pool._lost_in_a_row[w.slot] = pool._lost_in_a_row.get(w.slot, 0) + 1
        if case is None:  # lost between cases: a replacement has not yet shown it makes progress
            idle = pool._idle_losses[w.slot] = pool._idle_losses.get(w.slot, 0) + 1
            if idle > MAX_IDLE_LOSSES:
                self.give_up(w, f"lost {idle} workers between cases")
                return
        pool.stats.replaced += 1
        spare = next((o for o in pool._workers.values() if o.slot == w.slot and o.spare), None)
        if spare is None:
            pool._spawn(w.slot, w.gpu)
        else:  # warm already, or on its way: its ready limit runs from its own start
            spare.spare = False
            self.dispatch(spare)
        if pool.device != "cpu":  # on the CPU a spare's start-up takes the cores the cases run on
            pool._spawn(w.slot, w.gpu, spare=True)

    def give_up(self, w: _Worker, why: str) -> None:
        """The device does not answer: no replacement; its cases go to the other devices."""
        pool = self.pool
        for other in [o for o in pool._workers.values() if o.slot == w.slot]:
            self.stop(other)  # w and the slot's spare
        lost = pool._lost_in_a_row.get(w.slot, 0)
        after = f" (after {lost} worker{'s' * (lost != 1)} lost on it in a row)" if lost else ""
        pool.stats.unhealthy[f"worker{w.slot}"] = f"{pool._where(w)} {why}{after}"

    def end_now(self, reason: str, when: str) -> None:
        """The deadline's and a cancellation's end: stop the cases in flight, skip the rest."""
        for w in list(self.pool._workers.values()):
            case = self.in_flight(w)
            if case is not None:
                spec, cur = case
                elapsed = time.monotonic() - cur.started
                self.record(
                    w,
                    spec,
                    "skip",
                    f"{reason}: {when} {elapsed:.1f} s into this case (last step: {cur.phase}); stopped",
                    wall_s=round(elapsed, 3),
                )
            self.stop(w)
        self.skip_the_rest(f"{reason}: {when} before this case started")

    # messages

    def handle(self, kind: str, wid: int, payload: Any) -> None:
        w = self.pool._workers.get(wid)
        if w is None:  # a stopped worker's late message
            return
        now = time.monotonic()
        if kind == "ready":
            self.on_ready(w, payload, now)
        elif kind == "start":
            uid, index = payload
            spec = self.books.spec(uid, index)
            w.current = _Current(uid, index, now, time_limit(self.measured.get(spec.key), self.pool.floor_s))
            w.current.phase_at = now
        elif kind == "phase" and w.current is not None:
            w.current.phase, w.current.phase_at = payload, now
        elif kind == "result":
            self.on_result(w, *payload)
        elif kind == "state" and self.pool.identify:
            self.pool.states.setdefault(f"worker{w.slot}", {}).update(payload)
        elif kind == "crash":
            self.pool.stats.crashes += 1
            self.on_death(w, f"could not start a worker: {payload}", f"crashed during this case: {payload}")

    def on_ready(self, w: _Worker, payload: dict[str, Any], now: float) -> None:
        pool = self.pool
        w.ready = True
        name = f"worker{w.slot}" + (f"-{w.wid}" if w.wid > len(pool.slots) else "")
        pool.stats.startup_s[name] = round(now - w.spawned, 3)
        pool.stats.startup_split[name] = payload["startup"]
        pool.stats.startup_wait_s[name] = round(now - max(pool._loaded_at, w.spawned), 3)
        if pool.identify:
            pool.states.setdefault(f"worker{w.slot}", {}).setdefault("before", payload["before"])
        self.dispatch(w)

    def on_result(self, w: _Worker, uid: int, index: int, data: dict[str, Any]) -> None:
        if not self.books.close(uid, index):  # already recorded (a lost worker's late message)
            return
        result = CaseResult.from_dict(data)
        w.current = None
        self.pool._lost_in_a_row[w.slot] = 0
        if self.books.unit_done(uid) and uid in w.outstanding:
            w.outstanding.remove(uid)
        self.dispatch(w)
        where = f"gpu{w.slot} " if self.pool.identify else ""
        self.outbox.append((f"{where}{result.case.suite}: {result.case.name}", result))

    def on_death(self, w: _Worker, before_ready: str, in_case: str) -> None:
        """A worker that crashed or exited: a spare is judged only if it is needed (the replacement then
        starts afresh); one that could not even start gives its device up; else its case is lost."""
        if w.spare:
            self.stop(w)
        elif not w.ready:
            self.give_up(w, before_ready)
        else:
            self.lose(w, "error", f"worker {w.slot} {in_case}")

    def watchdog(self) -> None:
        pool = self.pool
        for w in list(pool._workers.values()):
            cur = w.current
            now = time.monotonic()
            if cur is not None and now - cur.started > cur.limit:
                pool.stats.timeouts += 1
                self.lose(w, "timeout", pool._timeout_message(w, cur))
            elif not w.proc.is_alive() and w.eof and all(m[1] != w.wid for m in self.backlog):
                # Dead, and every message it sent before dying has been handled: a "start" still
                # unread would leave its case unrecorded, and run again by the replacement.
                pool.stats.crashes += 1
                code = w.proc.exitcode
                self.on_death(
                    w,
                    f"could not start a worker: it exited with code {code} before it was ready",
                    f"died (exit code {code}) during this case",
                )
            elif (
                not w.ready
                and not w.spare
                and pool._library is not None
                and now - max(w.spawned, pool._loaded_at) > pool.ready_limit_s
            ):
                self.give_up(w, f"did not answer: no worker ready {pool.ready_limit_s:g} s after it started")
