"""benchmarks/h200/h200_split.py's host-side logic, without a GPU: each build's effective launch settings
from its flags over the kernel's defaults, which kernels it runs per check shape, where bit-equality
with the default is owed (other_kernel, split_rows) and the split tiles' rows. The device checks
trust these to tell a real difference from an expected one."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from regress.facts.cases import Shape

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
import cuda_plan as ctp  # noqa: E402
import h200_split as hs  # noqa: E402

OLD = "-DRA_CUDA_TAIL_SPLIT=0 -DRA_CUDA_LONG_BLOCK_N=0 -DRA_CUDA_DYN_SCHED=0"
AB = {
    "new": (),
    "old": tuple(OLD.split()),  # the previous default: none of the three
    "lr0": ("-DRA_CUDA_LONG_RULE=0",),  # the long kernel wherever >= 2048 keys (calls 33-34)
    "lb0": ("-DRA_CUDA_LONG_BLOCK_N=0",),  # the tail split alone
    "t8": ("-DRA_CUDA_TAIL_SPLIT=8",),  # 8 tail parts
    "t3": ("-DRA_CUDA_TAIL_SPLIT=3",),  # 3 tail parts: the rule's plan at (1,200,100,2000)
    "lb176": ("-DRA_CUDA_LONG_BLOCK_N=176",),
    "ns": ("-DRA_CUDA_SHORT_BLOCK_N=0",),  # no short-key kernel
}


@pytest.fixture(autouse=True)
def libs(monkeypatch):
    monkeypatch.setattr(hs, "LIBS", AB)


def test_imports_without_cuda_and_reads_h200_libs():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "H200_LIBS": f"new=;old={OLD}", "PYTHONPATH": str(ROOT)}
    code = (
        "import h200_split as h, torch; "
        "print(torch.cuda.is_available(), h.LIBS, h.settings('old')['tail_split'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT / "benchmarks" / "h200",
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "False {'new': (), 'old': ('-DRA_CUDA_TAIL_SPLIT=0', '-DRA_CUDA_LONG_BLOCK_N=0', "
        "'-DRA_CUDA_DYN_SCHED=0')} 0"
    )


def test_settings_are_the_flags_over_the_kernel_defaults():
    def long_settings(name: str) -> tuple[int, int, int]:
        f = hs.settings(name)
        return f["long_block_n"], f["long_rule"], f["long_min_keys"]

    assert long_settings("new") == (160, 1, 2048) and hs.settings("new")["tail_split"] == 1  # the defaults
    assert long_settings("old")[0] == 0 and hs.settings("old")["tail_split"] == 0
    assert hs.settings("t8")["tail_split"] == 8 and long_settings("lr0") == (160, 0, 2048)
    assert hs.settings("s4")["split"] == 4 and hs.settings("nosplit")["split"] == 1  # CHECK_ONLY builds too
    with pytest.raises(KeyError):
        hs.settings("nobuild")


def takes_long(name: str, s: Shape) -> bool:
    return hs.path(name, s).long_n != 0


def test_the_check_shapes_take_the_paths_they_are_for():
    # the default's long kernel: where 160-key blocks pad less than 128-key ones
    assert [takes_long("new", s) for s in hs.LONG_CHECK] == [False, True, True, False, True]
    assert all(takes_long("lr0", s) for s in hs.LONG_CHECK)  # all five under RULE=0
    for name in ("new", "lr0", "lb176"):
        assert takes_long(name, hs.LONG_EDGE), name
    assert not any(takes_long("old", s) for s in (*hs.LONG_CHECK, hs.LONG_EDGE))
    # the tail split: the default's on every tail shape but 4000 keys, which its long kernel takes
    plans = [hs.path("new", s).tail for s in hs.TAIL_SHAPES]
    assert [p.splits for p in plans] == [4, 4, 3, 0, 8]
    assert hs.path("new", hs.TAIL_SHAPES[3]).long_n == 160
    assert hs.path("lb0", hs.TAIL_SHAPES[3]).tail == ctp.TailPlan(4, 8, 4)
    assert hs.path("new", hs.TAIL_SHAPES[4]).long_n == 0  # 4096 keys: the tail split, not the long kernel
    assert all(hs.tail_rows("old", s) is None for s in hs.TAIL_SHAPES)
    # decode rows, a key short of the threshold, short keys: neither
    for s in (Shape(8, 32, 64, 4096), Shape(4, 16, 256, 2047), Shape(2, 24, 4096, 77)):
        assert hs.path("new", s)[:3] == hs.path("old", s)[:3] == (1, 0, ctp.NONE), s
    # the short-key kernel: one block of 80 keys, where the dynamic scheduler does not run
    assert (
        hs.path("new", Shape(2, 24, 4096, 77)).short_n == hs.path("new", Shape(2, 40, 1024, 80)).short_n == 80
    )
    for s in (Shape(2, 24, 4096, 81), Shape(256, 32, 128, 77), Shape(1, 32, 1, 8192)):
        assert hs.path("new", s).short_n == 0, s  # a key too many; the dynamic scheduler's; split decode
    assert hs.path("old", Shape(256, 32, 128, 77)).short_n == 80  # no dynamic scheduler in "old"
    assert hs.path("ns", Shape(2, 24, 4096, 77)).short_n == 0
    assert hs.path("new", Shape(1, 32, 1, 8192)).splits > 1  # decode: split_rule's


def test_bits_are_owed_exactly_where_both_builds_run_the_same_kernels():
    s2049, s2048 = Shape(3, 16, 1000, 2049), Shape(4, 16, 256, 2048)
    assert hs.other_kernel("new", "old", s2049) and hs.long_differs("new", "old", s2049)
    assert not hs.other_kernel("new", "old", s2048)  # neither takes it: the same bits
    # other long settings, but the same kernel on this shape: the same bits; not on 2048 keys
    assert not hs.other_kernel("new", "lr0", s2049)
    assert hs.other_kernel("new", "lr0", s2048)
    assert hs.other_kernel("new", "lb176", s2049)  # both long, another N
    # a tail difference is not other_kernel: the whole tiles still owe their bits
    assert not hs.other_kernel("new", "old", hs.TAIL_SHAPES[0])
    assert hs.other_kernel("new", "old", hs.TAIL_SHAPES[3])  # the long kernel beside whole tiles
    assert hs.other_kernel("new", "nosplit", Shape(1, 32, 1, 8192))  # another uniform split
    assert not hs.other_kernel("new", "nosplit", Shape(1, 24, 4097, 4097))


def test_tail_rows_are_the_last_tiles():
    r = hs.tail_rows("new", Shape(4, 100, 65, 1000))  # 400 tiles of one query block: the last 4 heads
    assert r is not None and r.shape == (4, 100, 65)
    assert r.sum() == 4 * 65 and r[3, 96:].all() and not r[:3].any() and not r[3, :96].any()
    r = hs.tail_rows("new", Shape(2, 100, 130, 1000))  # 2 query blocks a head: the last 2 heads
    assert r is not None and r.sum() == 2 * 130 and r[1, 98:].all()
    r = hs.tail_rows("new", Shape(1, 200, 100, 2000))  # 68 tail tiles
    assert r is not None and r.sum() == 68 * 100 and r[0, 132:].all() and not r[0, :132].any()


def test_split_rows_are_either_builds_split_rows_where_the_plans_differ():
    s = Shape(1, 200, 100, 2000)
    assert hs.split_rows("new", "t3", s) is None  # forced 3 parts is the rule's plan: every bit owed
    both = hs.split_rows("new", "t8", s)
    assert both is not None and np.array_equal(both, hs.tail_rows("new", s))
    only = hs.split_rows("old", "new", s)
    assert only is not None and np.array_equal(only, hs.tail_rows("new", s))
    assert hs.split_rows("old", "lb0", Shape(4, 16, 256, 2048)) is None  # no tail (128 tiles)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_same_bits_outside_tail_counts_each_side(layout):
    s = Shape(2, 100, 130, 1000)
    a = torch.randn(s.b, s.h, s.sq, 128).to(torch.bfloat16)
    b = a.clone()
    b[1, 99, 129, 5] += 1  # a split row (the last head's last row)
    b[1, 99, 7, :3] *= 3  # and 3 more on a split row
    b[0, 0, 0, 0] += 1  # a whole tile
    if layout == "bshd":
        a, b = a.transpose(1, 2).contiguous(), b.transpose(1, 2).contiguous()
    assert hs.same_bits_outside_tail("new", "old", s, layout, a, b) == (1, 4)
    assert hs.same_bits_outside_tail("new", "lb0", s, layout, a, b) == (5, None)  # the same plan
    assert hs.same_bits_outside_tail("new", "lb0", s, layout, a, a) == (0, None)


def test_forced_splits_are_builds_of_two_or_more_splits(monkeypatch):
    """A forced split (timed on the decode and edge shapes only, left out of the bit checks) is a
    build of -DRA_CUDA_SPLIT=N, N >= 2, whatever its name: call 38's s0 (the build without the
    short-key kernel) was taken for one by its name and went unchecked."""
    libs = {
        **AB,
        "s2": ("-DRA_CUDA_SPLIT=2",),
        "s16": ("-DRA_CUDA_SPLIT=16",),
        "s0": ("-DRA_CUDA_SHORT_BLOCK_N=0",),
        "s8": ("-DRA_CUDA_NEXT_QK=0",),  # a name that looks like a split count
        "one": ("-DRA_CUDA_SPLIT=1",),
        "many": ("-DRA_CUDA_SPLIT=3", "-DRA_CUDA_SHORT_BLOCK_N=0"),
    }
    monkeypatch.setattr(hs, "LIBS", libs)
    assert [hs.forced_split(n) for n in ("s2", "s4", "s16", "many")] == [True] * 4  # s4: a check build
    assert not any(hs.forced_split(n) for n in ("s0", "s8", "one", "nosplit", "ns", "new", "unknown"))


def test_a_timed_build_under_a_check_builds_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """H200_LIBS is read when the module is imported: re-imported here under each value (a fresh
    interpreter a case cost ~2.5 s; test_imports_without_cuda_and_reads_h200_libs keeps one)."""
    try:
        monkeypatch.setenv("H200_LIBS", "new=;s4=-DRA_CUDA_SPLIT=4")
        assert importlib.reload(hs).LIBS == {"new": (), "s4": ("-DRA_CUDA_SPLIT=4",)}
        monkeypatch.setenv("H200_LIBS", "new=;nosplit=-DRA_CUDA_TAIL_SPLIT=0")
        with pytest.raises(SystemExit) as refused:
            importlib.reload(hs)
        assert "H200_LIBS: nosplit: the name of a check build" in str(refused.value)
        assert "nosplit=-DRA_CUDA_SPLIT=1" in str(refused.value)
    finally:
        monkeypatch.delenv("H200_LIBS")
        importlib.reload(hs)  # the module as the other tests found it


def test_the_mma_sync_fallback_owes_no_bits(monkeypatch):
    """-DRA_CUDA_FORCE_MMA_SYNC=1 runs every launch on the 64 x 64 mma.sync tiles: the mirror must
    not predict the TMA kernels' splits or tail plans for it, nor owe the default's bits."""
    monkeypatch.setattr(hs, "LIBS", {**AB, "mma": ("-DRA_CUDA_FORCE_MMA_SYNC=1",)})
    for s in (
        Shape(4, 100, 65, 1000),
        Shape(1, 32, 1, 8192),
        Shape(2, 40, 1024, 77),
        Shape(3, 16, 1000, 2049),
    ):
        assert hs.path("mma", s) == ctp.LaunchPath(1, 0, ctp.NONE, 0, True)
        assert hs.other_kernel("new", "mma", s) and not hs.other_kernel("new", "ns", Shape(8, 4, 256, 256))


def test_the_short_kernel_owes_the_128_key_kernels_bits():
    """A build without the short-key kernel runs the 128-key kernel on SHORT_CHECK: not another
    kernel in other_kernel's sense (no fp64 exemption), so every bit is compared."""
    for s in (*hs.SHORT_CHECK, hs.SHORT_EDGE):
        assert hs.path("new", s).short_n == 80 and hs.path("ns", s).short_n == 0, s
        assert not hs.other_kernel("new", "ns", s), s
