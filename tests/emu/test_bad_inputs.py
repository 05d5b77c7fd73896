"""Hostile inputs to the emulator's entry points and the MI300X model's command line: a missing,
truncated or foreign code object, sizes the host part refuses, scales the host part replaces, and
model constants a sensitivity run cannot set. Each is one clear error (or the host's own answer),
never a traceback or a silently wrong figure."""

from __future__ import annotations

import math
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from regress.emu.codeobject import CodeObject, CodeObjectError
from regress.emu.library import ROUNDING_NAMES, EmuLibrary, kernel_name, tail_split_plan
from regress.facts.abi import KernelError
from regress.native.plan import plan_launch

# Every kernel name our host part launches, each an empty gfx942 kernel: enough to load and plan, never
# to run a real call (every test here stops before a launch).
NAMES = [kernel_name(r, p) for r in ROUNDING_NAMES for p in (True, False)] + ["ra_attn_split_gfx942_strided"]
KERNEL = """\
.text
.globl {n}
.p2align 8
.type {n},@function
{n}:
  s_endpgm
.L{n}_end:
.size {n}, .L{n}_end-{n}
.rodata
.p2align 6
.amdhsa_kernel {n}
  .amdhsa_next_free_vgpr 8
  .amdhsa_next_free_sgpr 8
  .amdhsa_accum_offset 8
.end_amdhsa_kernel
"""
META = """\
  - {{.name: {n}, .symbol: {n}.kd, .kernarg_segment_size: 0, .kernarg_segment_align: 8,
     .group_segment_fixed_size: 0, .private_segment_fixed_size: 0, .wavefront_size: 64,
     .sgpr_count: 8, .vgpr_count: 8, .max_flat_workgroup_size: 512, .args: []}}
"""


def _assemble(root: Path, names: list[str], arch: str = "gfx942") -> Path:
    mc, lld = shutil.which("llvm-mc-19"), shutil.which("ld.lld-19")
    if not (mc and lld):
        pytest.fail("llvm-mc-19 and ld.lld-19 are needed (scripts/test.sh installs llvm-19 and lld-19)")
    src = (
        f'.amdgcn_target "amdgcn-amd-amdhsa--{arch}"\n'
        + "".join(KERNEL.format(n=n) for n in names)
        + f".amdgpu_metadata\n---\namdhsa.target: amdgcn-amd-amdhsa--{arch}\namdhsa.version: [1, 2]\n"
        + "amdhsa.kernels:\n"
        + "".join(META.format(n=n) for n in names)
        + "...\n.end_amdgpu_metadata\n"
    )
    s, o, co = root / f"{arch}.s", root / f"{arch}.o", root / f"{arch}-{len(names)}.co"
    s.write_text(src)
    subprocess.run(
        [mc, "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-filetype=obj", str(s), "-o", str(o)], check=True
    )
    subprocess.run([lld, "-shared", str(o), "-o", str(co)], check=True)
    return co


@pytest.fixture(scope="module")
def ours_shaped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A code object with our kernels' names (empty bodies)."""
    return _assemble(tmp_path_factory.mktemp("names"), NAMES)


def test_a_missing_corrupt_or_foreign_code_object_is_one_code_object_error(
    tmp_path: Path, ours_shaped: Path
) -> None:
    data = ours_shaped.read_bytes()
    cases = {
        "missing.co": None,
        "empty.co": b"",
        "text.co": b"not a code object\n",
        "truncated.co": data[:200],  # the header's section table lies past the end
        "half.co": data[: len(data) // 2],
    }
    other = _assemble(tmp_path, ["k"], arch="gfx90a")
    paths = [tmp_path / n for n in cases] + [tmp_path, other]
    for name, raw in cases.items():
        if raw is not None:
            (tmp_path / name).write_bytes(raw)
    for path in paths:
        with pytest.raises(CodeObjectError) as e:
            CodeObject.load(path)
        assert str(path) in str(e.value) and "\n" not in str(e.value), e.value
    with pytest.raises(CodeObjectError, match="is not gfx942"):
        CodeObject.load(other)


def test_emu_library_refuses_a_code_object_without_our_kernels(tmp_path: Path) -> None:
    peer = _assemble(tmp_path, ["k"])
    with pytest.raises(
        CodeObjectError, match=r"not our attention code object.*ra_attn_fwd_gfx942_rtne_packed"
    ):
        EmuLibrary(peer)


@pytest.mark.parametrize("shape", [(1, 4, 1, 0), (1, 0, 1, 8), (0, 4, 1, 8), (1, 4, 0, 8)])
def test_empty_sizes_are_refused_as_the_host_part_refuses_them(
    ours_shaped: Path, shape: tuple[int, int, int, int]
) -> None:
    """ra_validate_params: every size >= 1 (RA_ERR_SHAPE, code 3); Sk = 0 returned NaN rows before."""
    b, sq, h, sk = shape
    lib = EmuLibrary(ours_shaped)
    q = torch.zeros(b, sq, h, 128, dtype=torch.bfloat16)
    kv = torch.zeros(b, sk, h, 128, dtype=torch.bfloat16)
    with pytest.raises(KernelError, match="every size must be >= 1") as e:
        lib.forward(q, kv, kv)
    assert e.value.code == 3


def test_the_scale_is_the_host_parts_effective_scale() -> None:
    """ra_effective_scale: the params' float, 1/sqrt(128) unless in (0, 3.0e38f). A tiny scale (0 as a
    float) ran as 0 (NaN output) and a huge one raised OverflowError before."""
    from regress.emu.library import effective_scale

    default = struct.unpack("<f", struct.pack("<f", 128**-0.5))[0]
    assert effective_scale(None) == default
    for s in (1e-50, 3.0e38, 3.3e38, 1e39, 1e300):
        assert effective_scale(s) == default, s
    assert effective_scale(0.5) == 0.5
    assert effective_scale(0.1) == struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert effective_scale(2.9e38) < 3.0e38 and math.isfinite(effective_scale(2.9e38))


def test_our_models_split_plan_reads_the_cu_count_it_is_given(ours_shaped: Path) -> None:
    """A --set cus run times the rounds with that count; the host's split rule must read the same."""
    from regress.emu.mi300x import Ours, Shape

    shape = Shape.parse("1,4,2048,2048")  # 32 q-blocks of 32 key tiles
    for cus in (304, 20):
        plan = tail_split_plan(32, 32, cus)
        launches = Ours(ours_shaped, cus=cus).launches(shape, "rtne")
        split = next(la for la in launches if la.grid.name == "split")
        assert split.grid.workgroups == plan.tail * plan.parts and split.grid.tiles == plan.tiles


def _model() -> ModuleType:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "mi300x"))
    import mi300x_model

    return mi300x_model


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--set", "clock_eff=nan"], "finite number >= 0"),
        (["--set", "clock_eff=inf"], "finite number >= 0"),
        (["--set", "vmem_latency=-1"], "finite number >= 0"),
        (["--set", "clock_eff=0"], "must be > 0"),
        (["--set", "gemm_mfma_busy=0"], "must be > 0"),
        (["--set", "boost_headroom=2"], "once, not per parameter set"),
        (["--shapes", "16,lens=0/4"], "sizes must be positive"),
        (["--shapes", "16,lens=300/x"], "lens=L1/L2"),
        (["--shapes", "1,2,3,4,lens=5"], "varlen is H[,Hkv],lens="),
        (["--set", "cus=0.5"], "whole number >= 1"),
        (["--set", "vgpr_granule=64"], "once, not per parameter set"),
        (["--set", "mfma_16x16x16_bf16_passes=8"], "once, not per parameter set"),
        (["--shapes", "0,1,256,256"], "positive sizes"),
        (["--shapes", "1,3,256,256,2"], "not a multiple of Hkv"),
        (["--shapes", "1,1,256,8388608"], "samples at most 2,097,152 keys"),  # ~24 GiB: it was OOM
    ],
)
def test_bad_model_options_are_usage_errors(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        _model().main(["--kernels", "ours", *argv])
    assert e.value.code == 2
    assert says in capsys.readouterr().err


@given(st.text(alphabet="0123456789,/=lensacuz- ", max_size=40))
def test_any_shape_text_parses_or_is_a_value_error(text: str) -> None:
    from regress.emu.mi300x import Shape

    try:
        s = Shape.parse(text)
    except ValueError as e:
        assert "shape" in str(e) and "\n" not in str(e)
    else:  # what parses is a shape the model can take
        assert min(s.b, s.h, s.sq, s.sk, s.hkv) >= 1 and s.h % s.hkv == 0
        assert s.flops > 0 and len(s.seqs()) == s.b


def test_a_bad_code_object_wheel_or_results_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.co").write_bytes(b"\x7fELF\x02" + b"\0" * 40)
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    for argv, says in [
        (["--kernels", "ours", "--code-object", str(tmp_path / "none.co")], "cannot read the code object"),
        (["--kernels", "ours", "--code-object", str(tmp_path / "bad.co")], "bad.co"),
        (["--kernels", "aiter", "--aiter-wheel", str(tmp_path / "none.whl")], "does not exist"),
        (["--markdown", str(tmp_path / "bad.jsonl")], "not a results file"),
        (["--markdown", str(tmp_path / "none.jsonl")], "not a results file"),
    ]:
        with pytest.raises(SystemExit) as e:
            _model().main(argv)
        msg = str(e.value.code)
        assert msg.startswith("mi300x_model") and says in msg and "\n" not in msg, msg


def test_the_rise_rate_sample_refuses_more_keys_than_it_may_hold() -> None:
    from regress.emu.mi300x import MAX_SAMPLED_KEYS, rise_rate

    with pytest.raises(ValueError, match="at most 2,097,152"):
        rise_rate(MAX_SAMPLED_KEYS // 64 + 1)


def test_a_plan_the_code_object_cannot_run_is_one_error(ours_shaped: Path) -> None:
    """hip-emu runs exactly the launches the gfx942 planner lists: a tail-split plan (3 q-blocks of
    13 key tiles on 304 CUs) on a code object without the merge kernels is refused, naming them,
    before anything runs; it never quietly runs another plan."""
    lib = EmuLibrary(ours_shaped)
    q = torch.zeros(1, 40, 3, 128, dtype=torch.bfloat16)
    kv = torch.zeros(1, 777, 3, 128, dtype=torch.bfloat16)
    with pytest.raises(
        KernelError, match="gfx942_tail_split launches ra_attn_merge_gfx942_rtna_strided"
    ) as e:
        lib.forward(q, kv, kv)
    assert e.value.code == 8 and "\n" not in str(e.value)
    assert lib.last_plan is None
    full = plan_launch("hip", 1, 3, 40, 777, rounding="rtna")  # the same planner, with its launch list
    assert lib.plan(1, 3, 40, 777, layout="bshd", rounding="rtna") == {
        k: v for k, v in full.items() if k != "launches"
    }
