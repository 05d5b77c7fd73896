"""Whole-call MI300X predictions: the extrapolation arithmetic in closed form, the steady state of our
code object, the peers' (skipped, with the reason, when their inputs are absent), and the
benchmark's JSON lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from regress.emu import timing
from regress.emu.cdna3 import C
from regress.emu.mi300x import Shape
from regress.emu.timing import Grid, SteadyState
from regress.facts.resources import mi300x_predicted_dir

HZ = C["clock_ghz"] * 1e9 * C["clock_eff"]  # the clock of a launch without MFMA activity (the peak)


def _hz(st: SteadyState, share: float = 1.0) -> float:
    """The power-managed clock of a round whose workgroup slots are `share` full, x clock_eff."""
    return timing.clock_ghz(share * timing.matrix_activity(st)) * 1e9 * C["clock_eff"]


def _st(fixed: float, per_tile: float, resident: int = 1) -> SteadyState:
    return SteadyState("k", resident, fixed, per_tile, 0.5, {}, {})


def test_rounds_include_the_last_partial_round() -> None:
    cus = int(C["cus"])
    t = timing.launch_time(Grid("main", cus + 1, 10, 0.0, 0.0), _st(100, 10))
    assert t.rounds == 2 and t.bound == "compute"
    assert t.ms == pytest.approx(2 * (100 + 10 * 10) / HZ * 1e3)
    t = timing.launch_time(Grid("main", cus, 10, 0.0, 0.0), _st(100, 10))
    assert t.rounds == 1 and t.ms == pytest.approx((100 + 10 * 10) / HZ * 1e3)


def test_a_partial_round_with_fewer_resident_workgroups_uses_their_own_steady_state() -> None:
    cus = int(C["cus"])
    seen = []

    def partial(k: int) -> SteadyState:
        seen.append(k)
        return _st(50, 5, k)

    t = timing.launch_time(Grid("main", 2 * cus + 1, 4, 0.0, 0.0), _st(100, 10, 2), partial)
    assert seen == [1] and t.rounds == 2
    assert t.ms == pytest.approx(((100 + 40) + (50 + 20)) / HZ * 1e3)


def test_the_bandwidth_bounds_win_when_they_are_larger() -> None:
    hbm = C["hbm_tb_s"] * 1e12  # one second of HBM traffic
    t = timing.launch_time(Grid("main", 1, 1, hbm, 0.0), _st(100, 10))
    assert t.bound == "hbm" and t.ms == pytest.approx(1e3)
    l2 = C["l2_bytes_per_clk_xcd"] * C["xcds"] * HZ
    t = timing.launch_time(Grid("main", 1, 1, 0.0, 2 * l2), _st(100, 10))
    assert t.bound == "l2" and t.ms == pytest.approx(2e3)


def test_shape_parse() -> None:
    s = Shape.parse("2,24,8192,4096,8")
    assert (s.b, s.h, s.sq, s.sk, s.hkv) == (2, 24, 8192, 4096, 8)
    assert Shape.parse("1,2,3,4").hkv == 2
    for bad in ("1,2,3", "1,2,x,4", "1,0,3,4", "1,6,3,4,4"):
        with pytest.raises(ValueError, match="shape"):
            Shape.parse(bad)


def test_tiles_that_raise_a_running_max_pay_the_rescale_share() -> None:
    st = SteadyState("k", 1, 100.0, 10.0, 0.5, {}, {}, rise_per_tile=8.0)
    t = timing.launch_time(Grid("main", 1, 10, 0.0, 0.0, rise_rate=0.25), st)
    assert t.compute_ms == pytest.approx((100 + (10 + 0.25 * 8) * 10) / HZ * 1e3)


def test_the_sample_inputs_hold_every_rows_max_in_tile_0_or_raise_it_every_tile() -> None:
    from regress.emu.mi300x import sample_qkv

    for layout in ("bshd", "bhsd"):
        for rising in (False, True):
            q, k, _ = sample_qkv(64, 4 * 32, 32, rising, layout)
            qs, ks = (t[0, :, 0] if layout == "bshd" else t[0, 0] for t in (q, k))
            bmax = (qs.float() @ ks.float().T).view(64, 4, 32).amax(-1)
            if rising:
                assert (bmax[:, 1:] > bmax[:, :-1]).all()
            else:
                assert (bmax[:, :1] > bmax[:, 1:]).all()


def test_the_published_workloads_rise_rate_falls_with_the_key_count() -> None:
    from regress.emu.mi300x import rise_rate

    assert rise_rate(1) == 0.0
    short, long = rise_rate(16), rise_rate(256)
    # A new maximum lands in tile t of t tiles with probability about 1/t per row, so the share of
    # tiles falls roughly like log(n)/n; a 16-row group makes a rise in any row likely early on.
    assert 0 < long < short < 1


def _check_steady(st: SteadyState, mfma_per_tile: float) -> None:
    assert st.issued_per_tile["mfma"] == mfma_per_tile
    assert 0 < st.mfma_busy < 1 and st.fixed > 0
    # Every clock of every wave is booked to one bucket: per tile they add up to the tile's clocks,
    # up to the drain of the last wave (a few issue cycles).
    assert sum(st.cost_per_tile.values()) == pytest.approx(st.per_tile, rel=0.05)


@pytest.mark.slow
def test_our_steady_state_and_prediction(tmp_path_factory: pytest.TempPathFactory) -> None:
    from regress.emu.mi300x import Ours, Predictor
    from regress.native.build import build_kernel

    ours = Ours(build_kernel("hip-emu", cache_dir=tmp_path_factory.mktemp("co")).path)
    pred = Predictor()
    shape = Shape.parse("1,38,2048,2048")  # 304 q-blocks: one full round, no tail to split
    p = pred.predict(ours, shape, "rtne")
    (la,) = ours.launches(shape, "rtne")
    st = pred.steady("ours", la)
    _check_steady(st, 128)  # 64 for S^T = K Q^T, 64 for O^T += V^T P^T, per 64 keys per wave
    assert p.bound == "compute" and p.launches[0].rounds == 1
    # The lazy O rescale (RA_HIP_LAZY_RESCALE, on by default) costs extra on a tile that raises a
    # row max, paid at the published inputs' rise rate for a 32-row wave.
    assert st.rise_per_tile > 0 and 0 < la.grid.rise_rate < 1
    per_tile = st.per_tile + la.grid.rise_rate * st.rise_per_tile
    assert p.ms == pytest.approx((st.fixed + per_tile * 32) / _hz(st) * 1e3)
    assert 1.0 < p.launches[0].clock_ghz < C["clock_ghz"]  # a full round runs below the peak

    # Step 10: 32 q-blocks leave 272 CUs idle; the host's rule splits them by key range, and the call
    # is two launches (no dense round left): the split parts (the same tile loop's steady state over
    # a part's tiles, their own rise rate), the merge (its HBM bound).
    from regress.emu.library import tail_split_plan
    from regress.emu.mi300x import rise_rate

    small = Shape.parse("1,4,2048,2048")
    plan = tail_split_plan(32, 32, 304)
    assert plan.tail == 32 and plan.parts * plan.tiles >= 32 > (plan.parts - 1) * plan.tiles
    split, merge = ours.launches(small, "rtne")
    assert split.key == la.key
    assert split.grid.workgroups == 32 * plan.parts and split.grid.tiles == plan.tiles
    assert split.grid.rise_rate == rise_rate(plan.tiles, 32, 64)
    assert (
        merge.record is None and merge.grid.hbm_bytes == 32 * plan.parts * 256 * 132 * 4 + 32 * 256 * 128 * 2
    )
    q = pred.predict(ours, small, "rtne")
    split_tile = st.per_tile + split.grid.rise_rate * st.rise_per_tile
    share = min(1.0, split.grid.workgroups / C["cus"])
    hz = _hz(st, share)
    assert q.launches[0].ms == pytest.approx((st.fixed + split_tile * plan.tiles) / hz * 1e3)
    assert q.ms == pytest.approx(sum(t.ms for t in q.launches))
    assert q.ms < p.ms / 2  # unsplit, the 32 blocks would take one round of 32 tiles, as p's 304 do


@pytest.mark.slow
def test_aiter_steady_state() -> None:
    # the product's own lookup: $REGRESS_AITER_WHEEL, else the cache scripts/test.sh fills (a path
    # of one machine's here once made CI skip this with the wheel in the cache)
    from regress.emu.peers import aiter as peer

    try:
        wheel = peer.wheel()
    except peer.PeerUnavailable as exc:
        pytest.skip(f"AITER wheel unavailable: {exc}")
    from regress.emu.mi300x import AiterModel, Predictor

    model = AiterModel(wheel)
    (la,) = model.launches(Shape.parse("1,1,256,256"), "rtne")
    _check_steady(Predictor().steady("aiter", la), 32)  # 32 x 32x8 MFMA per 32-key tile per wave
    # Grouped-query (s_gqa = H / Hkv): the same tiles, so the same compute time; fewer K/V bytes.
    pred = Predictor()
    dense, gqa = (pred.predict(model, Shape.parse(t), "rtne") for t in ("1,8,4096,4096", "1,8,4096,4096,2"))
    assert gqa.launches[0].compute_ms == dense.launches[0].compute_ms
    assert gqa.launches[0].hbm_ms < dense.launches[0].hbm_ms


@pytest.mark.slow
def test_moonmath_steady_state() -> None:
    # the product's own lookup ($REGRESS_MOONMATH_SRC), as test_moonmath.py's, not one machine's path
    from regress.emu.peers import moonmath as peer

    try:
        src = peer.find_source()
    except peer.MoonMathSourceMissing as exc:
        pytest.skip(str(exc))
    from regress.emu.mi300x import MoonMathModel, Predictor

    model = MoonMathModel(src)
    launches = model.launches(Shape.parse("1,1,384,384"), "rtz")
    assert [la.grid.name for la in launches] == ["v_transpose", "forward"]
    st = Predictor().steady("moonmath", launches[1])
    _check_steady(st, 192)  # 48 rows x 64 keys, per wave
    # Its rescale runs only on a tile that raises a row's running max: that costs clocks.
    assert st.rise_per_tile > 0


@pytest.mark.slow
def test_the_benchmark_prints_one_line_per_row_and_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "mi300x"))
    import mi300x_model

    argv = ["--kernels", "ours", "--modes", "rtz", "--shapes", "1,2,512,512", "1,4,512,512,2"]
    assert mi300x_model.main(argv) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) == 3 and lines[-1]["summary"] and lines[-1]["predicted"]
    gqa = lines[1]  # grouped-query: the v2 kernel since issue 40 (it was a row saying it was refused)
    assert "error" not in gqa and gqa["hkv"] == 2 and gqa["predicted_ms"] > 0, gqa
    row = lines[0]
    assert row["shape"] == [1, 2, 512, 128] and row["kernel"] == "ours" and row["published_ms"] is None
    assert row["predicted_ms"] > 0 and row["bound"] == "compute" and 0 < row["mfma_busy"] < 1
    with pytest.raises(SystemExit):
        mi300x_model.main(["--kernels", "ours", "--set", "nonsense=1"])


# --- the uncertainty band (pure parts; the committed table as real input) ---------------------------

COMMITTED = mi300x_predicted_dir()  # the folder the site shows, through the package's one reader of it


def _committed_rows() -> tuple[list[dict[str, object]], dict[str, object]]:
    from regress.present.site import predicted

    path = predicted.latest_file(COMMITTED)
    assert path is not None and path.name.startswith("predicted-v2"), path
    table = predicted.load(path)
    assert table is not None and table["summary"] is not None
    return table["rows"], table["summary"]


def test_every_committed_prediction_has_a_band_that_holds_its_point() -> None:
    rows, summary = _committed_rows()
    assert len(rows) == 81 and summary["predicted"] is True
    for r in rows:
        assert r["low_ms"] <= r["predicted_ms"] <= r["high_ms"], r
        assert r["low_ms"] < r["high_ms"], r  # the readings do move every row
    ours = [r for r in rows if r["kernel"] == "ours"]
    for r in ours:
        for peer in ("aiter", "moonmath"):
            p, lo, hi = r[f"vs_{peer}"]
            assert lo <= p <= hi


def test_a_ratio_band_is_computed_per_reading_not_from_the_parts_bands() -> None:
    from regress.emu.mi300x import band, ratio_band

    # a reading that slows both kernels alike leaves the ratio where it was
    num = {"point": 2.0, "slow": 4.0, "fast": 1.0}
    den = {"point": 1.0, "slow": 2.0, "fast": 0.5}
    assert ratio_band(num, den) == (2.0, 2.0, 2.0)
    (_, nlo, nhi), (_, dlo, dhi) = band(num), band(den)
    assert (nlo / dhi, nhi / dlo) == (0.5, 8.0)  # what the parts' bands would have said
    with pytest.raises(ValueError, match="point"):
        ratio_band({"a": 1.0}, {"a": 1.0})


def test_the_committed_ratio_bands_are_per_reading() -> None:
    """Ours vs a peer on the committed rows: inside the parts' band and strictly narrower than it (no
    reading is at once the slowest for one kernel and the fastest for the other)."""
    rows, _ = _committed_rows()
    by = {(tuple(r["shape"]), r["mode"], r["kernel"]): r for r in rows}
    narrower = 0
    for (sh, m, k), r in by.items():
        if k != "ours":
            continue
        for peer in ("aiter", "moonmath"):
            o = by[(sh, m, peer)]
            _, lo, hi = r[f"vs_{peer}"]
            parts_lo, parts_hi = o["low_ms"] / r["high_ms"], o["high_ms"] / r["low_ms"]
            assert parts_lo - 1e-3 <= lo and hi <= parts_hi + 1e-3
            narrower += (hi - lo) < (parts_hi - parts_lo) - 1e-3
    assert narrower == 2 * 27  # from the parts, each band would be exactly the parts' band


def test_the_committed_summary_is_what_the_rows_give() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "mi300x"))
    import mi300x_model

    rows, summ = _committed_rows()
    again = mi300x_model.summary(rows, summ["params"], 0.0)  # type: ignore[arg-type]
    for key in (
        "aiter_median_abs_err",
        "moonmath_median_abs_err",
        "aiter_validation_rows",
        "moonmath_validation_rows",
        "speedup_within_0.05",
        "ranked_correctly",
        "aiter_spread_within_0.04",
    ):
        assert again[key] == summ[key], key
    # 48 of the 54 published times validate: the six fit rows (RTNE, both peers, 3 shapes) excluded
    assert summ["aiter_validation_rows"] + summ["moonmath_validation_rows"] == 48
    assert sum(bool(r.get("fit_row")) for r in rows) == 6


def test_shape_parse_takes_a_causal_mask_and_per_sequence_lengths() -> None:
    s = Shape.parse("2,16,8192,8192,causal")
    assert s.causal and not s.lens and not s.plain and (s.b, s.sq) == (2, 8192)
    v = Shape.parse("16,8,lens=1000/4000/8000,causal")
    assert (v.b, v.h, v.hkv, v.sq, v.sk, v.lens, v.causal) == (3, 16, 8, 8000, 8000, (1000, 4000, 8000), True)
    assert Shape.parse("4,lens=300").seqs() == [(300, 300)]
    lse = Shape.parse("1,32,4096,4096,lse")
    assert lse.lse and lse.plain and not Shape.parse("1,32,4096,4096").lse
    for bad in ("lens=3/4", "1,2,lens=3/x", "16,lens=0/4", "1,2,3,lens=4", "6,4,lens=5", "16,lens=3,lens=4"):
        with pytest.raises(ValueError, match="shape"):
            Shape.parse(bad)


def test_masked_flops_count_only_the_scores_a_row_sees() -> None:
    dense = Shape.parse("1,1,1000,1000")
    causal = Shape.parse("1,1,1000,1000,causal")
    assert causal.flops == pytest.approx(dense.flops * (1000 * 1001 / 2) / 1000**2)
    # bottom-right with Sk > Sq: row i sees Sk - Sq + i + 1 keys
    wide = Shape.parse("1,1,10,30,causal")
    assert wide.flops == 4 * 128 * sum(30 - 10 + i + 1 for i in range(10))
    tall = Shape.parse("1,1,30,10,causal")  # the first 20 rows see nothing
    assert tall.flops == 4 * 128 * sum(range(1, 11))
    varlen = Shape.parse("2,lens=100/300")
    assert varlen.flops == 4 * 2 * 128 * (100**2 + 300**2)
    assert varlen.bytes_qkvo() == 2 * 128 * (2 * 2 * 400 + 2 * 2 * 400)


def test_aiter_causal_and_varlen_grids() -> None:
    """Causal: workgroups pair q-tiles j and Q-1-j (tg_div 2), each timed at the average key tiles;
    varlen: the workgroups holding rows, each at its sequence's key tiles."""
    from regress.emu.peers import aiter as peer

    try:
        from regress.emu.mi300x import AiterModel

        model = AiterModel()
    except peer.PeerUnavailable as exc:
        pytest.skip(f"AITER wheel unavailable: {exc}")
    (la,) = model.launches(Shape.parse("1,1,1024,1024,causal"), "rtz")
    assert la.key == "main-causal-rtz" and la.tiles == (24, 40)
    assert (la.grid.workgroups, la.grid.tiles) == (2, (8 + 16 + 24 + 32) // 2)
    (la,) = model.launches(Shape.parse("2,lens=256/512"), "rtne")
    assert la.key == "main-group-rtne" and la.grid.workgroups == 2 * 3
    assert la.grid.tiles == round(2 * (8 + 2 * 16) / 6)


@pytest.mark.slow  # a gfx942 build and the v2 kernel's emulated steady state
def test_our_v2_launches_and_steady_state(tmp_path_factory: pytest.TempPathFactory) -> None:
    """GQA, causal and varlen calls are one launch of the v2 kernel (parts/plan.h's gfx942_v2): the
    q-blocks that hold rows, a causal one timed at the average of the tiles up to its last row; the
    same key loop as the dense kernel (128 MFMAs per tile), the causal diagonal in the fixed part."""
    from regress.emu.mi300x import Ours, Predictor
    from regress.native.build import build_kernel

    ours = Ours(build_kernel("hip-emu", cache_dir=tmp_path_factory.mktemp("co")).path)
    (la,) = ours.launches(Shape.parse("1,1,1024,1024,causal"), "rtz")
    assert la.key == "v2-causal-rtz-bshd" and la.tiles == (8, 12)
    assert (la.grid.workgroups, la.grid.tiles) == (4, round((4 + 8 + 12 + 16) / 4))
    (la,) = ours.launches(Shape.parse("2,lens=256/512"), "rtne")
    assert la.key == "v2-rtne-bshd" and la.grid.workgroups == 2 * 3
    assert la.grid.tiles == round(2 * (4 + 2 * 8) / 6)
    (la,) = ours.launches(Shape.parse("1,4,600,300,2"), "rtne")  # GQA alone
    assert la.key == "v2-rtne-bshd" and (la.grid.workgroups, la.grid.tiles) == (12, 5)
    # A GQA decode runs as the dense call over each K/V head's rows (the planner's view): 16 x 8 heads
    # of 4 rows, one q-block each, with the tail split; the ablation times it on the v2 kernel.
    assert ours.runs_as(Shape.parse("16,32,1,8192,8,causal")) == Shape(16, 8, 4, 8192, 8)
    split, merge = ours.launches(Shape.parse("16,32,1,8192,8"), "rtna")
    assert (split.grid.name, merge.grid.name) == ("split", "merge")
    # Its q-blocks hold 4 rows: sampled on 4-row blocks (block_rows), where 7 of 8 waves have no row
    # and skip their MFMAs, so a key tile costs less than a full block's.
    assert split.key == "main-rtna-bshd-rows4"
    short = Predictor().steady("ours", split)
    full = Predictor().steady("ours", ours.launches(Shape.parse("1,4,4096,4096"), "rtna")[0])
    assert short.issued_per_tile["mfma"] < full.issued_per_tile["mfma"] and short.per_tile < full.per_tile
    ours.gqa_rows = False
    (la,) = ours.launches(Shape.parse("16,32,1,8192,8"), "rtna")
    assert la.key == "v2-rtna-bshd-rows1" and la.grid.workgroups == 16 * 32
    ours.gqa_rows = True
    # An unmasked fixed-length v2 call (GQA prefill, an LSE) whose last round is partial takes the
    # planner's v2 tail split (gfx942_v2_split): 512 q-blocks on 304 CUs are one round of the v2
    # kernel, then the last 208 in 4 parts of 16 key tiles (the v2 steady state), then the merge; the
    # ablation times one v2 launch of all 512.
    for shape in ("1,32,4096,4096,8", "1,32,4096,4096,lse"):
        main, split, merge = ours.launches(Shape.parse(shape), "rtne")
        assert main.key == split.key == "v2-rtne-bshd" and merge.grid.name == "merge"
        assert (main.grid.workgroups, split.grid.workgroups, split.grid.tiles) == (304, 208 * 4, 16)
        ours.v2_split = False
        (la,) = ours.launches(Shape.parse(shape), "rtne")
        assert la.key == "v2-rtne-bshd" and (la.grid.workgroups, la.grid.tiles) == (512, 64)
        ours.v2_split = True
    (la,) = ours.launches(Shape.parse("1,32,4096,4096,8,causal"), "rtne")  # causal: never split
    pred = Predictor()
    for shape in ("1,4,600,300,2", "1,1,1024,1024,causal"):
        (la,) = ours.launches(Shape.parse(shape), "rtne")
        _check_steady(pred.steady("ours", la), 128)
