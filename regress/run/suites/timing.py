"""Timing of the kernel and its baselines, interleaved: device events on GPU, perf_counter on CPU,
the round loop, and the probe that drops a baseline which refuses a case (perf and e2e use all
three)."""

from __future__ import annotations

import functools
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import torch

from regress.run.suites.common import synchronize

# GPU cycles of the spin kernel queued before each timed round (~1 ms at 2 GHz): while it runs the
# host enqueues the whole round, so the events bracket device work only, not host launch gaps
# (which would dominate kernels of ~0.1 ms, e.g. the cross-attention shape).
PRIME_CYCLES = 2_000_000


class Timer:
    """Times calls: CUDA events on GPU (read after one synchronise at the end); on the CPU
    perf_counter_ns, or with `thread_clock` the calling thread's CPU time (thread_time_ns): the work a
    single-threaded call did, which a neighbour preempting it cannot stretch. On the shared 2-core
    VM (load 6) wall time read 1.3 ms or 4-15 ms for the same 1.3 ms call, at random."""

    def __init__(self, gpu: bool, thread_clock: bool = False) -> None:
        self.gpu = gpu
        self._clock = time.thread_time_ns if thread_clock else time.perf_counter_ns
        self._events: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = defaultdict(list)
        self._cpu: dict[str, list[float]] = defaultdict(list)
        self._can_prime = True

    def prime(self, cycles: int = PRIME_CYCLES) -> None:
        """Call before each round of timed calls (no-op on CPU); `cycles` of GPU spin."""
        if self.gpu and self._can_prime:
            try:
                torch.cuda._sleep(cycles)
            except (AttributeError, RuntimeError):  # a private API: time without it rather than fail
                self._can_prime = False

    def time(self, key: str, fn: Callable[[], object]) -> None:
        if self.gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            self._events[key].append((start, end))
        else:
            t0 = self._clock()
            fn()
            self._cpu[key].append((self._clock() - t0) / 1e6)

    def samples(self) -> dict[str, list[float]]:
        """Milliseconds per call, by key, in call order."""
        if not self.gpu:
            return dict(self._cpu)
        torch.cuda.synchronize()
        return {k: [float(s.elapsed_time(e)) for s, e in ev] for k, ev in self._events.items()}


def both_listings_rounds(
    device: str,
    arms: Sequence[tuple[str, Callable[[int], object]]],
    warm: int,
    iters: int,
    **kw: Any,
) -> tuple[dict[str, list[float]], int]:
    """interleaved_rounds of two arms in each listing, half the rounds each (arms as given, then
    reversed, each half its own warm-up and an even count of rounds, so no ABBA block straddles the
    swap): each arm's samples in round order, and the index where the second listing begins (0
    when `iters` < 4 leaves no room for two). On the H200 an A/A read the arm in one listing role
    0.6-1.9 % slower whatever the library, and the two listings cancelled it (docs/detection.md §7)."""
    first = (iters // 4) * 2
    if first == 0:
        return interleaved_rounds(device, arms, warm, iters, **kw), 0
    one = interleaved_rounds(device, arms, warm, first, **kw)
    two = interleaved_rounds(device, list(arms)[::-1], warm, iters - first, **kw)
    return {key: one[key] + two[key] for key, _ in arms}, first


def working_baselines(
    probes: Sequence[tuple[str, Callable[[], object]]], device: str, notes: list[str]
) -> set[str]:
    """The keys worth timing: each "baseline:..." probe is called once and dropped, with a note, if it
    raises (cuDNN refuses Sk = 1, say), so a baseline's limits never cost the kernel its measurement.
    Other keys (the kernel) are kept unprobed: their failure is the case's error."""
    kept = set()
    for key, fn in probes:
        if key.startswith("baseline:"):
            try:
                fn()
                synchronize(device)
            except Exception as exc:  # any refusal: the kernel is still timed
                notes.append(f"{key.split(':')[1]} left out: {type(exc).__name__}: {str(exc)[:200]}")
                continue
        kept.add(key)
    return kept


def round_orders(iters: int, block_seed: int | None = None) -> list[bool]:
    """Per timed round of interleaved_rounds, True where the runners go in list order: ABBA blocks
    (list order in even rounds), or with `block_seed` each block's orientation drawn from a
    generator of that seed. Analyses of the raw samples read each call's position from here."""
    flips = random.Random(block_seed) if block_seed is not None else None
    out: list[bool] = []
    flip = False
    for i in range(iters):
        if flips is not None and i % 2 == 0:
            flip = flips.random() < 0.5
        out.append((i % 2 == 0) != flip)
    return out


def interleaved_rounds(
    device: str,
    runners: Sequence[tuple[str, Callable[[int], object]]],
    warm: int,
    iters: int,
    *,
    thread_clock: bool = False,
    prime_cycles: int = PRIME_CYCLES,
    host: bool = False,
    block_seed: int | None = None,
) -> dict[str, list[float]]:
    """Milliseconds per call, by key: `warm` untimed rounds, then `iters` timed rounds of every
    runner once (each called with the round's index), the order reversed every other round so no
    runner always follows the same neighbour; a GPU round starts behind a spin of `prime_cycles`
    (Timer.prime). `device`: "cpu" or a torch GPU device. With `host`, the host's clock times each
    call on a GPU too (what the calling thread spends to enqueue it: the eager host cost), and the
    device is synchronised after each round, untimed, so no round waits on a full launch queue.
    `block_seed`: each block of two rounds (ABBA or BAAB) takes its orientation from a generator of
    this seed, so which runner goes first is not tied to the round's parity (and so to the input set
    of an even rotation); None: the list's order in even rounds."""
    for i in range(warm):
        for _, fn in runners:
            fn(i)
    synchronize(device)
    timer = Timer(device != "cpu" and not host, thread_clock=thread_clock)
    for i, in_list_order in enumerate(round_orders(iters, block_seed)):
        order = runners if in_list_order else runners[::-1]
        timer.prime(prime_cycles)
        for key, fn in order:
            timer.time(key, functools.partial(fn, i))
        if host:
            synchronize(device)
    return timer.samples()
