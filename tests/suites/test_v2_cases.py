"""Issue 40's axes in the case catalogue and the suites: masks, K/V heads and varlen mixes in case
names and keys (a dense case's key unchanged), the Llama-3-8B layer, the closed-form pair count, and
every new CPU case of the quick ULP and determinism suites within the contract."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from regress.facts.abi import RA_ERR_UNSUPPORTED, KernelError
from regress.facts.cases import (
    LLAMA3_8B_HEADS,
    LLAMA3_8B_KV_HEADS,
    Shape,
    perf_case,
    prefill_seqs,
    serving_mix,
    spec_shape,
    ulp_case,
    visible_pairs,
)
from regress.facts.results import MASKS
from regress.kernel import load_library, reference
from regress.native.build import build_kernel
from regress.run.suites import SuiteContext, get_suite
from regress.run.suites.common import guarded, is_v2


class _Unloaded:
    backend = "cpu"
    path = Path("/nonexistent/libregress_attn.so")

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"cases() used library.{name}")


def _plan(suite: str, device: str, quick: bool) -> list:  # type: ignore[type-arg]
    return get_suite(suite).cases(SuiteContext(library=_Unloaded(), device=device, quick=quick))  # type: ignore[arg-type]


def test_dense_case_names_and_params_are_as_before() -> None:
    spec = perf_case(Shape(1, 2, 256, 77), "bshd", "rtne")
    assert spec.name == "b1_h2_sq256_sk77_bshd_rtne"
    assert spec.params == {"b": 1, "h": 2, "sq": 256, "sk": 77, "d": 128, "layout": "bshd", "mode": "rtne"}
    # hkv equal to h is the dense case too
    assert perf_case(Shape(1, 2, 256, 77, hkv=2), "bshd", "rtne").key == spec.key


def test_v2_axes_are_in_names_keys_and_round_trip() -> None:
    seqs = [(0, 3), (1, 1), (40, 90)]
    shapes = [
        Shape(1, 32, 2048, 2048, hkv=8, mask="causal_top_left"),
        Shape(1, 32, 2048, 2048, hkv=8, mask="causal_bottom_right"),
        Shape.varlen(4, seqs, hkv=2, mask="causal_bottom_right"),
        Shape.varlen(4, seqs[::-1], hkv=2, mask="causal_bottom_right"),
    ]
    specs = [ulp_case(s, "bshd", "rtz") for s in shapes]
    assert len({s.name for s in specs}) == len({s.key for s in specs}) == len(specs)
    assert specs[0].name == "b1_h32_sq2048_sk2048_bshd_rtz_hkv8_causal-tl"
    assert specs[2].name.startswith("b3_h4_sq41_sk94_bshd_rtz_hkv2_causal-br_varlen3-")
    for shape, spec in zip(shapes, specs, strict=True):
        assert spec_shape(spec) == shape and is_v2(shape)


@given(st.sampled_from(MASKS), st.integers(0, 40), st.integers(0, 40))
def test_visible_pairs_is_the_reference_mask(mask: str, sq: int, sk: int) -> None:
    assert visible_pairs(mask, sq, sk) == int(reference.visible_keys(mask, sq, sk).sum())  # type: ignore[arg-type]


def test_flops_count_the_unmasked_work() -> None:
    dense = Shape(1, 32, 8192, 8192)
    causal = Shape(1, 32, 8192, 8192, hkv=8, mask="causal_top_left")
    assert causal.flops == dense.flops // 2 + 4 * 32 * 128 * 8192 // 2  # the diagonal counts
    assert causal.min_bytes < dense.min_bytes  # 8 K/V heads are read, not 32
    mix = serving_mix(60, 4, short=(16, 512), long=(2000, 8000), seed=7)
    assert len(mix) == 64 and min(mix) >= 16 and max(mix) <= 8000 and sum(x >= 2000 for x in mix) == 4
    assert Shape.varlen(32, prefill_seqs(mix)).pairs == sum(n * n for n in mix)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("quick", [True, False])
def test_every_suite_plans_the_v2_axes(device: str, quick: bool) -> None:
    for suite in ("ulp", "determinism", "perf", "e2e"):
        shapes = [spec_shape(s) for s in _plan(suite, device, quick)]
        v2 = [s for s in shapes if is_v2(s)]
        assert any(s.heads_kv < s.h for s in v2), suite
        assert any(s.mask != "none" for s in v2), suite
        if suite != "e2e":
            assert any(s.seqs is not None for s in v2), suite
    ulp = [spec_shape(s) for s in _plan("ulp", device, quick)]
    assert {m for s in ulp for m in [s.mask]} >= {"causal_top_left", "causal_bottom_right"}
    lengths = {n for s in ulp if s.seqs for pair in s.seqs for n in pair}
    assert {0, 1} <= lengths, "varlen lengths 0 and 1"


def test_e2e_has_the_llama3_8b_layer_at_full_size_on_the_gpu() -> None:
    gpu = {(spec_shape(s), s.params["layer"]) for s in _plan("e2e", "cuda", False)}
    llama = {(sh.b, sh.sq, sh.sk, sh.mask, layer) for sh, layer in gpu if (sh.h, sh.heads_kv) == (32, 8)}
    assert (LLAMA3_8B_HEADS, LLAMA3_8B_KV_HEADS) == (32, 8)
    assert {(sq, layer) for _, sq, _, _, layer in llama} == {
        (2048, "prefill"),
        (8192, "prefill"),
        (1, "decode"),
    }
    assert any(layer == "decode" and sk == 8192 and b == 16 for b, _, sk, _, layer in llama)


def test_unsupported_is_a_skip_with_the_backends_reason() -> None:
    spec = ulp_case(Shape(1, 2, 8, 8, mask="causal_top_left"), "bshd", "rtne")
    q = torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16)

    def body() -> object:  # what a library without a feature raises (RA_ERR_UNSUPPORTED)
        raise KernelError(
            f"hip-emu kernel refused the call: mask 1 (causal): the hip-emu backend does not implement masks "
            f"yet (a q of {tuple(q.shape)})",
            RA_ERR_UNSUPPORTED,
        )

    r = guarded(spec, body)  # type: ignore[arg-type]
    assert r.status == "skip" and "hip-emu backend does not implement masks yet" in r.message


@pytest.mark.parametrize("suite", ["ulp", "determinism"])
def test_new_cpu_cases_meet_the_contract(suite: str) -> None:
    lib = load_library(build_kernel("cpu").path)
    ctx = SuiteContext(library=lib, device="cpu", quick=True)  # type: ignore[arg-type]
    s = get_suite(suite)
    specs = [sp for sp in s.cases(ctx) if is_v2(spec_shape(sp))]
    assert specs
    for sp in specs:
        r = s.run_case(ctx, sp)
        assert r.status == "pass", (sp.name, r.message)
