"""AITER v3's own bf16 forward code objects on the emulator (the amd-aiter wheel, fetched at run time;
these tests skip with the reason when it cannot be had)."""

from __future__ import annotations

import numpy as np
import pytest

from regress.emu.machine import compiled
from regress.emu.peers import aiter as peer
from regress.facts import numerics
from regress.facts.cases import Shape
from regress.facts.metrics import load_contract
from regress.facts.results import ROUNDING_MODES
from regress.kernel import reference
from regress.run.suites.common import make_inputs


@pytest.fixture(scope="module")
def aiter() -> peer.Aiter:
    try:
        return peer.Aiter.load()
    except peer.PeerUnavailable as exc:
        pytest.skip(f"AITER wheel unavailable: {exc}")


@pytest.mark.slow  # three peer code objects decoded (2.4 s CPU)
def test_three_objects_load_and_every_instruction_is_modelled(aiter: peer.Aiter) -> None:
    """Each mode's object: the kernel the launcher names, 512-thread workgroups, 64 KiB LDS, fp32
    denormals flushed, and every one of its instructions compiles (none is refused)."""
    for mode in ROUNDING_MODES:
        kernel = aiter.code(mode).kernels[aiter.kernel_name(mode)]
        assert kernel.metadata[".reqd_workgroup_size"] == [peer.THREADS, 1, 1]
        assert kernel.descriptor.group_segment_size == 65536
        assert kernel.descriptor.float_denorm_mode_32 == 0
        assert kernel.vgpr_count == 256
        program, metas = compiled(kernel)
        assert len(program) == len(kernel.instructions) > 2000
        assert sum(m.mfma_passes == 8 for m in metas) == 176  # v_mfma_f32_32x32x8_bf16


def test_argument_struct_from_the_header(aiter: peer.Aiter) -> None:
    """fmha_fwd_v3_args: 32 fields in 16-byte slots, 512 bytes, as the objects' metadata says."""
    by_name = {f.name: f for f in aiter.fields}
    assert len(aiter.fields) == 32 and aiter.kernarg_size == 512
    assert (by_name["ptr_o"].offset, by_name["ptr_q"].offset, by_name["scalar"].offset) == (0, 16, 80)
    assert (by_name["s_seq_len"].offset, by_name["s_kv_seq_len"].offset) == (96, 272)
    assert by_name["ptr_kseq_padding"].offset == 496 and by_name["ptr_kseq_padding"].size == 8


def test_launch_plan() -> None:
    """One dispatch: grid (ceil(Sq / 256), H, B) of 512 threads; bshd row strides are H·D·2 bytes."""
    (lp,) = peer.plan(2, 3, 300, 77, mode="rtz", layout="bshd")
    assert lp.grid == (2, 3, 2) and lp.block == 512 and (lp.tile_q, lp.tile_k) == (256, 32)
    assert lp.kernel == "_ZN5aiter23fmha_fwd_hd128_bf16_rtzE"
    assert lp.args["s_Seqs"] == 3 * 128 * 2 and lp.args["s_Ts"] == 256 * 3 * 128 * 2
    assert lp.args["s_Hs"] == 256 and lp.args["s_kv_seq_len"] == 77
    (lp,) = peer.plan(1, 2, 129, 33, mode="rtne", layout="bhsd")
    assert lp.args["s_Seqs"] == 256 and lp.args["s_Hs"] == 129 * 256
    with pytest.raises(ValueError, match="seqlen_q > 128"):
        peer.plan(1, 1, 128, 64, mode="rtne", layout="bhsd")


@pytest.mark.parametrize(("layout", "mode", "shape"), [("bhsd", "rtne", Shape(1, 1, 203, 45))])
def test_aiter_output_meets_the_contract_on_a_small_shape(
    aiter: peer.Aiter, layout: str, mode: str, shape: Shape
) -> None:
    """A partial query tile (203 of 256 rows) and a partial key tile (45 = 32 + 13): AITER's own bits
    against the fp64 reference, within the contract's scaled-ULP limit."""
    emu = peer.AiterEmu(aiter)
    q, k, v = make_inputs(shape, layout, seed=42, device="cpu")
    out = emu.forward(q, k, v, layout=layout, rounding=mode)
    ref, mag = reference.reference_attention(q, k, v, layout=layout, scale=128**-0.5)
    o_bits = reference.to_bhsd_bits(out, layout)
    su = numerics.scaled_ulp(o_bits, ref, mag)
    assert np.isfinite(su).all()
    assert su.max() <= load_contract().scaled_ulp_limit(mode)
    assert {h.kind for h in emu.last_hazards} <= set(peer.LENIENT)


@pytest.mark.slow  # the emulated peer kernel, twice (3.2 s CPU)
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_aiter_grouped_query_reads_key_head_i_over_group(aiter: peer.Aiter, layout: str) -> None:
    """Hk = 2 key/value heads for H = 4 query heads (s_gqa = 2, as AITER's dispatcher sets it): each
    query head i meets the contract against the fp64 reference with key/value head i // 2, and the
    output differs from pairing it with the other key/value head (the mapping is really exercised)."""
    import torch

    h, hk, sq, sk = 4, 2, 203, 45
    q, _, _ = make_inputs(Shape(1, h, sq, sk), layout, seed=7, device="cpu")
    _, k, v = make_inputs(Shape(1, hk, sq, sk), layout, seed=8, device="cpu")
    out = peer.AiterEmu(aiter).forward(q, k, v, layout=layout, rounding="rtne")
    axis = 2 if layout == "bshd" else 1
    o_bits = reference.to_bhsd_bits(out, layout)
    limit = load_contract().scaled_ulp_limit("rtne")
    for heads, want_pass in (([0, 0, 1, 1], True), ([1, 1, 0, 0], False)):
        idx = torch.tensor(heads)
        ref, mag = reference.reference_attention(
            q, k.index_select(axis, idx), v.index_select(axis, idx), layout=layout, scale=128**-0.5
        )
        su = numerics.scaled_ulp(o_bits, ref, mag)
        assert bool(np.isfinite(su).all() and su.max() <= limit) == want_pass
    (lp,) = peer.plan(1, h, sq, sk, mode="rtne", layout=layout, hk=hk)
    assert lp.args["s_gqa"] == 2
    with pytest.raises(ValueError, match="multiple of Hk"):
        peer.plan(1, 4, 300, 64, mode="rtne", layout="bshd", hk=3)


def test_compare_bits_histogram_and_nonfinite_identity() -> None:
    """compare_bits (the vs-AITER row): plain ULP over positions where both are finite; NaN/Inf
    positions and raw bit patterns compared without canonicalisation."""
    from regress.run.suites.ulp import compare_bits

    ours = np.array([0x3F80, 0x3F81, 0x3F80, 0x7FC0, 0x7F80, 0x0001], np.uint16)
    peer_ = np.array([0x3F80, 0x3F80, 0x3F84, 0x7FC0, 0x7F80, 0x8001], np.uint16)
    m = compare_bits(ours, peer_)
    assert m["plain_ulp_max"] == 4 and m["plain_ulp_hist_0"] == 1 and m["plain_ulp_hist_1"] == 1
    assert m["plain_ulp_hist_2"] == 1 and m["plain_ulp_hist_gt3"] == 1  # 0x0001 vs 0x8001: 2 apart
    assert m["nonfinite_positions_identical"] == 1 and m["nonfinite_bits_identical"] == 1
    assert m["frac_le1"] == 0.5
    other_nan = peer_.copy()
    other_nan[3] = 0x7FC1  # another NaN payload: same position, different bits
    m = compare_bits(ours, other_nan)
    assert m["nonfinite_positions_identical"] == 1 and m["nonfinite_bits_identical"] == 0
    finite_there = peer_.copy()
    finite_there[4] = 0x3F80
    m = compare_bits(ours, finite_there)
    assert m["nonfinite_positions_identical"] == 0 and m["peer_nonfinite"] == 1 and m["nonfinite"] == 2


def test_aiter_lse_is_the_natural_log_sum_exp(aiter: peer.Aiter) -> None:
    """With s_lse = 1 the kernel also stores each row's log-sum-exp (v_log_f32, then a multiply by
    1/log2 e) into LSE [B, H, Sq]: against fp64 within fp32 rounding of values up to ~14."""
    import torch

    emu = peer.AiterEmu(aiter)
    q, k, v = make_inputs(Shape(1, 2, 203, 77), "bshd", seed=42, device="cpu")
    emu.forward(q, k, v, layout="bshd", rounding="rtne", lse=True)
    assert emu.last_lse is not None
    s = q.double().transpose(1, 2) @ k.double().transpose(1, 2).transpose(-1, -2) * 128**-0.5
    want = torch.logsumexp(s, -1)
    assert (emu.last_lse.double() - want).abs().max().item() < 1e-5


def test_wheel_errors_are_one_line_reasons(tmp_path, monkeypatch) -> None:
    """A missing given file, downloading switched off with an empty cache, and a file that is not a
    wheel each give PeerUnavailable with the reason (nothing is half-written into the cache)."""
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(peer.WHEEL_ENV, raising=False)
    with pytest.raises(peer.PeerUnavailable, match="does not exist"):
        peer.wheel(tmp_path / "nope.whl")
    monkeypatch.setenv(peer.NO_DOWNLOAD_ENV, "1")
    with pytest.raises(peer.PeerUnavailable, match="downloading is off"):
        peer.wheel()
    bad = tmp_path / "amd_aiter-0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(peer.PeerUnavailable, match=r"amd_aiter-0-py3-none-any\.whl"):
        peer.Aiter.load(bad)
    assert not list((tmp_path / "cache").rglob("*.co"))


# --- the causal and group (varlen) objects ---------------------------------------------------------


def test_every_forward_variant_has_its_object_and_kernel_name() -> None:
    assert len(peer.VARIANTS) == 12 and len(set(peer.VARIANTS)) == 12
    assert peer.variant("rtz", causal=True, group=True) == "causal_rtz_group"
    assert peer.Aiter.kernel_name("rtne", causal=True) == "_ZN5aiter31fmha_fwd_hd128_bf16_causal_rtneE"
    with pytest.raises(ValueError, match="rounding mode"):
        peer.variant("rtx")


def test_causal_and_group_launch_plans() -> None:
    """Causal: each workgroup takes two 256-row tiles (grid x halved) and s_opt drops to 3 when H is
    not a multiple of 8 or Sq > 16384; group: grid (H, B, tiles) and no batch strides."""
    (lp,) = peer.plan(2, 16, 1300, 1300, mode="rtne", layout="bshd", causal=True)
    assert lp.grid == (3, 16, 2) and lp.args["s_opt"] == peer.TUNE_OPT
    assert "causal_rtne" in lp.kernel
    (lp,) = peer.plan(1, 6, 1300, 1300, mode="rtne", layout="bshd", causal=True)
    assert lp.args["s_opt"] == peer.TUNE_OPT - 2
    (lp,) = peer.plan(3, 4, 600, 700, mode="rtna", layout="bshd", group=True)
    assert lp.grid == (4, 3, 3) and lp.args["s_Bs"] == lp.args["s_k_Bs"] == 0
    assert lp.kernel.endswith("rtna_groupE")
    with pytest.raises(ValueError, match="packed BSHD"):
        peer.plan(1, 1, 300, 300, mode="rtne", layout="bhsd", group=True)


@pytest.mark.slow  # nine more peer objects decoded
def test_the_causal_and_group_objects_load_and_every_instruction_is_modelled(aiter: peer.Aiter) -> None:
    for mode in ROUNDING_MODES:
        for causal, group in ((True, False), (False, True), (True, True)):
            kernel = aiter.code(mode, causal, group).kernels[aiter.kernel_name(mode, causal, group)]
            assert kernel.metadata[".reqd_workgroup_size"] == [peer.THREADS, 1, 1]
            program, _ = compiled(kernel)
            assert len(program) == len(kernel.instructions) > 2000


def _ref(q, k, v, causal: bool):  # (S, H, D) bf16 -> fp64, the bottom-right causal mask
    import torch

    s = torch.einsum("qhd,khd->hqk", q.double(), k.double()) * peer.HEAD_DIM**-0.5
    if causal:
        keep = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool).tril(k.shape[0] - q.shape[0])
        s = s.masked_fill(~keep, float("-inf"))
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), v.double())


def _close(out, ref) -> None:
    # bf16 output: within 2 ULP of the fp64 reference relative, 0.01 absolute (AITER's own floor)
    err = (out.double() - ref).abs()
    assert bool((err <= 0.01 + 2**-7 * ref.abs()).all()), float(err.max())


@pytest.mark.slow  # the emulated causal and group objects on small shapes (~40 s CPU)
def test_causal_and_varlen_outputs_match_the_fp64_reference(aiter: peer.Aiter) -> None:
    import torch

    emu = peer.AiterEmu(aiter)
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 300, 1, 128, generator=g).to(torch.bfloat16) for _ in range(3))
    out = emu.forward(q, k, v, layout="bshd", rounding="rtne", causal=True)
    _close(out[0], _ref(q[0], k[0], v[0], True))
    # varlen: two packed sequences of 150 and 210 rows (the second's tile crosses the first's end)
    cu = torch.tensor([0, 150, 360], dtype=torch.int32)
    q, k, v = (torch.randn(1, 360, 1, 128, generator=g).to(torch.bfloat16) for _ in range(3))
    for causal in (False, True):
        out = emu.forward(q, k, v, rounding="rtz", causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu)
        for a, b in ((0, 150), (150, 360)):
            _close(out[0, a:b], _ref(q[0, a:b], k[0, a:b], v[0, a:b], causal))
    with pytest.raises(ValueError, match="both"):
        emu.forward(q, k, v, cu_seqlens_q=cu)
