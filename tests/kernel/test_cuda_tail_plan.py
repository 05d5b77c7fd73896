"""RA_CUDA_TAIL_SPLIT's rule (kernel/cuda/tail_plan.h, what the sm_90a host code runs): built with the
host compiler and run on a grid of launches, it gives the same plans as its Python mirror
(benchmarks/cuda_tail_plan.py, what h200_split.py's checks use to find the split tiles), and on the
nightly's families the plans docs/perf-notes.md states. No GPU, no nvcc."""

from __future__ import annotations

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


def test_split_rule_mirror_is_the_kernels(tmp_path):
    """shape_plan leaves split_rule's launches alone through a mirror of it: the mirror against
    attention_sm90.cu's own split_rule, its text cut out of the source and built on the host."""
    if CXX is None:
        pytest.skip("no host C++ compiler")
    source = (ROOT / "kernel/cuda/attention_sm90.cu").read_text()
    start = source.index("constexpr int kMaxSplits")
    body = source[start : source.index("\n}\n", source.index("int split_rule(")) + 3]
    src = tmp_path / "rule.cpp"
    src.write_text(
        "#include <algorithm>\n#include <cstdint>\n#include <cstdio>\n#include <cstddef>\n"
        "#define RA_CUDA_SPLIT -1\n" + body + "int main() {\n  long long t; int nb, sms;\n"
        '  while (std::scanf("%lld %d %d", &t, &nb, &sms) == 3)\n'
        '    std::printf("%d\\n", split_rule(t, nb, sms));\n}\n'
    )
    exe = tmp_path / "rule"
    subprocess.run([CXX, "-x", "c++", "-std=c++17", "-O2", str(src), "-o", str(exe)], check=True)
    cases = [
        (t, n, 132)
        for t in (1, 8, 31, 32, 64, 100, 131, 133, 200, 256, 400, 512, 864, 2048, 4096)
        for n in (1, 2, 4, 8, 16, 32, 36, 64, 128, 256)
    ]
    out = subprocess.run(
        [str(exe)], input="".join(f"{t} {n} {c}\n" for t, n, c in cases), capture_output=True, text=True
    ).stdout.splitlines()
    assert len(out) == len(cases)
    assert [int(x) for x in out] == [ctp.split_rule(*c) for c in cases]
    assert sum(int(x) > 1 for x in out) > 10  # the grid reaches split launches


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
