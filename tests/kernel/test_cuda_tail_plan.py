"""RA_CUDA_TAIL_SPLIT's rule (kernel/cuda/tail_plan.h, what the sm_90a host code runs): built with the
host compiler and run on a grid of launches, it gives the same plans as its Python mirror
(benchmarks/cuda_tail_plan.py, what h200_split.py's checks use to find the split tiles), and on the
nightly's families the plans docs/perf-notes.md states. The same for attention_sm90.cu's split_rule
and long_keys_pay (their text cut out of the source and built on the host, under several values
of their macros), and the mirror reads the macros' defaults from the kernel's #define lines. No
GPU, no nvcc."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import cuda_tail_plan as ctp  # noqa: E402

CXX = shutil.which("clang++-19") or shutil.which("clang++") or shutil.which("g++")


@pytest.fixture(scope="module")
def cpp_plan(tmp_path_factory):
    if CXX is None:
        pytest.skip("no host C++ compiler")
    tmp = tmp_path_factory.mktemp("tail_plan")
    src = tmp / "plan.cpp"
    src.write_text(
        '#include <cstdio>\n#include "cuda/tail_plan.h"\n'
        "int main() {\n  long long t; int nb, sms, forced;\n"
        '  while (std::scanf("%lld %d %d %d", &t, &nb, &sms, &forced) == 4) {\n'
        "    ra_cuda::TailPlan p = ra_cuda::tail_split_plan(t, nb, sms, forced);\n"
        '    std::printf("%lld %d %d\\n", (long long)p.tail, p.splits, p.blocks);\n  }\n}\n'
    )
    exe = tmp / "plan"
    argv = [CXX, "-x", "c++", "-std=c++17", "-O2", "-Ikernel", str(src), "-o", str(exe)]
    subprocess.run(argv, cwd=ROOT, check=True)

    def run(cases: list[tuple[int, int, int, int]]) -> list[str]:
        lines = "".join(f"{t} {n} {c} {f}\n" for t, n, c, f in cases)
        out = subprocess.run([str(exe)], input=lines, capture_output=True, text=True).stdout.splitlines()
        assert len(out) == len(cases), (len(out), len(cases))  # a C++ side that stopped early fails
        return out

    return run


def test_cpp_and_python_give_the_same_plan(cpp_plan):
    cases = [
        (tiles, nb, sms, forced)
        for sms in (1, 7, 132)
        for tiles in (1, sms - 1, sms, sms + 1, 2 * sms + 5, 400, 864, 2048, 3072, 4096, 8192, 8200)
        for nb in (1, 2, 3, 4, 8, 16, 31, 32, 36, 64, 128, 256, 300)
        for forced in (0, 2, 5, 100)
        if tiles > 0
    ]
    split = 0
    for (t, n, c, f), line in zip(cases, cpp_plan(cases), strict=True):
        p = ctp.tail_split_plan(t, n, c, f)
        assert line == f"{p.tail} {p.splits} {p.blocks}", (t, n, c, f, line, p)
        if p.splits:
            split += 1
            assert p.tail == t % c and t > c and p.splits >= 2
            assert (p.splits - 1) * p.blocks < n <= p.splits * p.blocks  # no empty part
            assert f > 1 or p.splits <= ctp.MAX_SPLITS
    assert split > 200


# (B, H, Sq, Sk) -> (tail tiles, parts, key blocks a part); None: not tail-split. The table of
# docs/perf-notes.md's tail-split section.
FAMILY_PLANS = {
    (1, 16, 16384, 16384): (68, 5, 26),
    (2, 16, 8192, 8192): (68, 5, 13),
    (4, 16, 4096, 4096): (68, 3, 11),
    (8, 16, 2048, 2048): None,
    (16, 16, 1024, 1024): None,
    (32, 16, 512, 512): None,
    (1, 64, 8192, 8192): (4, 8, 8),
    (1, 32, 16384, 16384): (4, 16, 8),
    (1, 16, 32768, 32768): (4, 20, 13),
    (8, 32, 2048, 2048): (4, 4, 4),
    (1, 24, 16384, 16384): (36, 7, 19),
    (2, 24, 8192, 8192): (36, 3, 22),
    (16, 32, 2048, 2048): (8, 4, 4),
    (1, 24, 4608, 4608): (72, 3, 12),
}


SM90 = ROOT / "kernel/cuda/attention_sm90.cu"


def _host_rule(tmp: Path, name: str, body: str, macros: dict[str, int], args: str, call: str):
    """Build `body` (C++ cut out of the kernel's source) on the host under `macros`, with a main
    that reads lines of `args` ints and prints `call`; returns a function of cases to output lines."""
    src = tmp / f"{name}.cpp"
    defines = "".join(f"#define {k} {v}\n" for k, v in macros.items())
    n = len(args.split())
    refs = ", ".join("&" + a for a in args.split())
    src.write_text(
        "#include <algorithm>\n#include <cstdint>\n#include <cstdio>\n#include <cstddef>\n"
        + defines
        + body
        + f"int main() {{\n  long long {', '.join(args.split())};\n"
        + f'  while (std::scanf("{" ".join(["%lld"] * n)}", {refs}) == {n})\n'
        + f'    std::printf("%d\\n", (int)({call}));\n}}\n'
    )
    exe = tmp / name
    subprocess.run([CXX, "-x", "c++", "-std=c++17", "-O2", str(src), "-o", str(exe)], check=True)

    def run(cases: list[tuple[int, ...]]) -> list[int]:
        lines = "".join(" ".join(map(str, c)) + "\n" for c in cases)
        out = subprocess.run([str(exe)], input=lines, capture_output=True, text=True).stdout.splitlines()
        assert len(out) == len(cases), (len(out), len(cases))
        return [int(x) for x in out]

    return run


def _cut(source: str, start: str, signature: str) -> str:
    """The source from `start` to the closing brace of the function declared by `signature`."""
    return source[source.index(start) : source.index("\n}\n", source.index(signature)) + 3]


@pytest.mark.parametrize("split", [-1, 1, 4])
def test_split_rule_mirror_is_the_kernels(tmp_path, split):
    """shape_plan and launch_path leave split_rule's launches alone through a mirror of it: the
    mirror against attention_sm90.cu's own split_rule, its text cut out of the source and built on
    the host, by the rule (-1, the default), never (1: nosplit) and forced (4: s4)."""
    if CXX is None:
        pytest.skip("no host C++ compiler")
    body = _cut(SM90.read_text(), "constexpr int kMaxSplits", "int split_rule(")
    rule = _host_rule(tmp_path, "rule", body, {"RA_CUDA_SPLIT": split}, "t nb sms", "split_rule(t, nb, sms)")
    cases = [
        (t, n, 132)
        for t in (1, 8, 31, 32, 64, 100, 131, 133, 200, 256, 400, 512, 864, 2048, 4096)
        for n in (1, 2, 4, 8, 16, 32, 36, 64, 128, 256)
    ]
    out = rule(cases)
    assert out == [ctp.split_rule(*c, split=split) for c in cases]
    assert sum(x > 1 for x in out) > (10 if split != 1 else -1)  # the grid reaches split launches


# (RA_CUDA_LONG_BLOCK_N, RA_CUDA_LONG_MIN_KEYS, RA_CUDA_LONG_RULE): the default, the rule off
# (calls 33-34's builds), no long kernel, other N and thresholds, a negative N (176-key kernel)
LONG_SETTINGS = [
    (160, 2048, 1),
    (160, 2048, 0),
    (0, 2048, 1),
    (176, 2048, 1),
    (192, 3000, 1),
    (176, 1024, 0),
    (-1, 2048, 1),
    (-1, 2048, 0),
]


@pytest.mark.parametrize("n,min_keys,rule", LONG_SETTINGS)
def test_long_keys_pay_mirror_is_the_kernels(tmp_path, n, min_keys, rule):
    """cuda_tail_plan.long_keys_pay (what launch_path and h200_split's exemptions use) against
    attention_sm90.cu's own, its text cut out of the source and built on the host under each
    setting, on every key count around the threshold and the 128/160/176/192 boundaries."""
    if CXX is None:
        pytest.skip("no host C++ compiler")
    body = _cut(SM90.read_text(), "constexpr bool long_keys_pay(", "constexpr bool long_keys_pay(")
    macros = {"RA_CUDA_LONG_BLOCK_N": n, "RA_CUDA_LONG_MIN_KEYS": min_keys, "RA_CUDA_LONG_RULE": rule}
    pay = _host_rule(tmp_path, "long", body, macros, "sk", "long_keys_pay((int)sk)")
    keys = sorted(
        {
            *range(1, 5200, 7),
            *(m * k + d for m in (128, 160, 176, 192) for k in range(1, 40) for d in (-1, 0, 1)),
        }
    )
    cases = [(k,) for k in keys if k > 0]
    out = pay(cases)
    assert out == [int(ctp.long_keys_pay(k, n, min_keys, rule)) for (k,) in cases]
    if n > 0 or (n < 0 and rule == 0):
        assert 0 < sum(out) < len(out)  # the grid reaches both answers
    else:  # no kernel, or a negative N under the rule: its 128-key comparison never pays
        assert sum(out) == 0


def test_launch_keeps_the_long_kernel_and_the_tail_split_exclusive():
    """launch_path's order, pinned to launch()'s text: the tail split is planned only for unsplit,
    non-decode launches that long_keys_pay refuses, and the long kernel taken only by unsplit
    non-decode launches that it accepts, each only where neither ping-pong nor the next-Q-K^T
    overlap runs."""
    src = " ".join(SM90.read_text().split())
    assert "if constexpr (RA_CUDA_TAIL_SPLIT != 0 && !NQK && !PP) { /* the tail split (tail_plan.h)" in src
    assert (
        "p.num_splits == 1 && p.seqlen_q > kDecodeMaxRows && !long_keys_pay(p.seqlen_k) ? tail_split_plan("
        in src
    )
    assert "if constexpr (RA_CUDA_LONG_BLOCK_N != 0 && !NQK && !PP) {" in src
    assert (
        "p.num_splits == 1 && !p.merge_in_kernel && !p.tile_counter && long_keys_pay(p.seqlen_k) && "
        "p.seqlen_q > kDecodeMaxRows" in src
    )


def test_defaults_are_read_from_every_define():
    """kernel_defaults finds every `#ifndef RA_CUDA_X` guard of kernel/cuda (so a default that is not
    an integer, or a guard written another way, is noticed here), and build_settings applies flags
    over them: -DX=0 turns the tail split off (it is not "by the rule")."""
    guards = set()
    for f in (ROOT / "kernel/cuda").iterdir():
        guards |= set(re.findall(r"^#ifndef (RA_CUDA_\w+)", f.read_text(), re.MULTILINE))
    found = ctp.kernel_defaults()
    assert guards and guards <= set(found)
    default = ctp.build_settings(())
    assert default.tail == found["RA_CUDA_TAIL_SPLIT"] and default.long_n == found["RA_CUDA_LONG_BLOCK_N"]
    assert default.decode_max_rows == 64  # attention_sm90.cu's kDecodeMaxRows, as read
    assert ctp.build_settings(["-DRA_CUDA_TAIL_SPLIT=0"]).tail_mode is None
    assert ctp.build_settings(["-DRA_CUDA_TAIL_SPLIT=1"]).tail_mode == 0
    assert ctp.build_settings(["-DRA_CUDA_TAIL_SPLIT=6"]).tail_mode == 6
    assert ctp.build_settings(["-DRA_CUDA_LONG_BLOCK_N=0"]).long_settings() == (0, 0, 0)
    assert ctp.build_settings(["-DRA_CUDA_LONG_RULE"]).long_rule == 1  # -DX alone is 1
    with pytest.raises(ValueError, match="RA_CUDA_LONG_BLOCK_N needs an integer"):
        ctp.build_settings(["-DRA_CUDA_LONG_BLOCK_N=big"])


def test_the_nightly_families_plans(cpp_plan):
    assert set(FAMILY_PLANS) == set(ctp.FAMILIES)
    shapes = list(FAMILY_PLANS)
    cases = [(b * h * -(-sq // 128), -(-sk // 128), 132, 0) for b, h, sq, sk in shapes]
    for shape, line in zip(shapes, cpp_plan(cases), strict=True):
        want = FAMILY_PLANS[shape]
        assert line == ("0 0 0" if want is None else " ".join(map(str, want))), (shape, line)
        assert ctp.shape_plan(*shape) == (want or ctp.NONE), shape


def test_fill_is_higher_wherever_the_plan_splits():
    for shape in ctp.FAMILIES:
        b, h, sq, sk = shape
        tiles, nb = b * h * -(-sq // 128), -(-sk // 128)
        plan = ctp.shape_plan(*shape)
        before, after = ctp.fill(tiles, nb, 132, ctp.NONE), ctp.fill(tiles, nb, 132, plan)
        assert before[0] <= 1 and after[0] <= 1
        if plan.splits:
            assert after[1] > before[1], shape
        else:
            assert after == before, shape


def test_decode_short_keys_and_whole_rounds_are_never_split():
    assert ctp.shape_plan(8, 32, 64, 8192) == ctp.NONE  # decode: seqlen_q <= 64
    assert ctp.shape_plan(2, 40, 1024 * 8, 256) == ctp.NONE  # the next-Q-K^T kernel's keys
    assert ctp.tail_split_plan(132 * 16, 128, 132) == ctp.NONE  # no tail
    assert ctp.tail_split_plan(100, 128, 132) == ctp.NONE  # no whole round: split_rule's grids
    assert ctp.tail_split_plan(2048, 1, 132, forced=8) == ctp.NONE  # one key block: nothing to split


def _constexpr(path: str, name: str) -> str:
    """The initialiser text of `constexpr <type> name = ...;` in kernel/cuda/`path`."""
    m = re.search(rf"constexpr [\w:]+ {name} = ([^;]+);", (ROOT / "kernel/cuda" / path).read_text())
    assert m, f"{name} not found in {path}"
    return m.group(1).strip()


def test_mirror_constants_are_the_kernels():
    """The constants cuda_tail_plan restates (launch_path's workspace caps and thresholds, the tail
    rule's bounds, the tile sizes) are the kernel's own, read from its source, so a change on the C++
    side fails here instead of silently moving the mirror's paths."""
    assert int(_constexpr("tail_plan.h", "kTailMaxSplits")) == ctp.MAX_SPLITS
    assert int(_constexpr("tail_plan.h", "kTailMinGainPerMille")) == ctp.MIN_GAIN_PER_MILLE
    assert int(_constexpr("mainloop_sm90.cuh", "kBlockM")) == ctp.BLOCK_M
    assert int(_constexpr("mainloop_sm90.cuh", "kBlockN")) == ctp.BLOCK_N
    assert int(_constexpr("params.cuh", "kHeadDim")) == ctp.HEAD_DIM
    assert int(_constexpr("split.cuh", "kMergeInKernelMaxRows")) == ctp.MERGE_IN_KERNEL_MAX_ROWS
    assert int(_constexpr("attention_sm90.cu", "kPingPongMaxKeys")) == ctp.PINGPONG_MAX_KEYS
    assert _constexpr("attention_sm90.cu", "kMaxWorkspaceBytes") == "size_t{512} << 20"
    assert ctp.MAX_WORKSPACE_BYTES == 512 << 20
    assert _constexpr("mainloop_sm90.cuh", "kLongBlockN") == (
        f"RA_CUDA_LONG_BLOCK_N > 0 ? RA_CUDA_LONG_BLOCK_N : {ctp.LONG_N_UNSET}"
    )


def test_shape_plan_is_the_default_builds_path():
    """shape_plan is what the default build runs: no tail plan where its long-key kernel takes the
    launch (the nightly's (3,40,1000,2049): 2049 keys pad less in blocks of 160), and launch_path's
    plan everywhere (it used to plan a tail split there, as for a build without the long kernel)."""
    default = ctp.build_settings(())
    assert ctp.launch_path(default, 3, 40, 1000, 2049).long_n == 160
    assert ctp.shape_plan(3, 40, 1000, 2049) == ctp.NONE
    assert ctp.shape_plan(4, 100, 65, 4000) == ctp.NONE  # 25 blocks of 160 against 32 of 128
    assert ctp.shape_plan(4, 100, 65, 4096) == ctp.TailPlan(4, 8, 4)
    assert ctp.shape_plan(4, 100, 65, 4096, forced=3) == ctp.TailPlan(4, 3, 11)
    for shape in ctp.FAMILIES:
        assert ctp.shape_plan(*shape) == ctp.launch_path(default, *shape).tail, shape


@pytest.mark.parametrize("n", [80, 0])
def test_short_keys_pay_mirror_is_the_kernels(tmp_path, n):
    """launch_path's short-key kernel against attention_sm90.cu's short_keys_pay, its text cut out
    of the source and built on the host, on every key count to 300, under the default block (80)
    and none (0); and the conditions launch() adds, pinned to its text."""
    if CXX is None:
        pytest.skip("no host C++ compiler")
    body = _cut(SM90.read_text(), "constexpr bool short_keys_pay(", "constexpr bool short_keys_pay(")
    pay = _host_rule(tmp_path, "short", body, {"RA_CUDA_SHORT_BLOCK_N": n}, "sk", "short_keys_pay((int)sk)")
    cases = [(k,) for k in range(1, 301)]
    out = pay(cases)
    build = ctp.build_settings([f"-DRA_CUDA_SHORT_BLOCK_N={n}", "-DRA_CUDA_DYN_SCHED=0"])
    assert out == [int(ctp.launch_path(build, 2, 40, 1024, k).short_n == n != 0) for (k,) in cases]
    assert sum(out) == n  # 1..80 keys, or none
    src = " ".join(SM90.read_text().split())
    assert "if constexpr (RA_CUDA_SHORT_BLOCK_N != 0 && NQK && !PP) {" in src
    assert "if (!launched && p.num_splits == 1 && !p.tile_counter && short_keys_pay(p.seqlen_k) &&" in src
    # after the dynamic scheduler's branch, which takes its launches first, under the gate the mirror
    # restates (one query block a head, at most RA_CUDA_DYN_MAX_BLOCKS key blocks a tile)
    assert src.index("p.tile_counter) run(") < src.index("short_keys_pay(p.seqlen_k) &&")
    assert (
        "if (RA_CUDA_DYN_SCHED && RA_CUDA_SHORT_STAGES != 3 && NQK && !PP && p.num_splits == 1 && "
        "p.num_n_blocks <= RA_CUDA_DYN_MAX_BLOCKS && p.num_m_blocks <= RA_CUDA_DYN_MAX_M_BLOCKS)" in src
    )
    default = ctp.build_settings([])
    assert ctp.launch_path(default, 256, 32, 128, 77).short_n == 0  # one query block: the counter's
    assert ctp.launch_path(default, 2, 40, 1024, 77).short_n == 80


def test_a_workspace_grows_only_the_short_part(tmp_path):
    """attention_sm90.cu's workspace_grown, cut out and built on the host: a part that holds the
    request keeps its size (a first counter request on a stream with partials once doubled them),
    a short one grows to at least twice its size."""
    if CXX is None:
        pytest.skip("no host C++ compiler")
    body = _cut(SM90.read_text(), "constexpr size_t workspace_grown(", "constexpr size_t workspace_grown(")
    grown = _host_rule(tmp_path, "grown", body, {}, "have need", "workspace_grown(have, need)")
    cases = [(0, 0), (0, 2), (100, 2), (100, 100), (100, 101), (100, 250), (1 << 20, 0)]
    assert grown(cases) == [0, 2, 100, 100, 200, 250, 1 << 20]
