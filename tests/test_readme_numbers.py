"""Issue #42 item 4: every figure README states about H200 runs, test counts and the tour is
derived here from the committed files it names (or from the code that generates it), so a stale
number fails a test instead of reaching a reader.

Timings (seconds) are not checked: a timing never decides a test; README gives them with the
machine they were measured on.
"""

from __future__ import annotations

import glob
import json
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from committed import headline

from regress.facts.metrics import stored_geomean, summarise
from regress.facts.resources import mi300x_predicted_dir
from regress.run.nightly import NightlyOptions, plan_cases

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MODES = ("rtne", "rtna", "rtz")


def _text() -> str:
    return README.read_text()


def _item(title: str) -> str:
    """The Measured bullet that starts `- **TITLE`, up to the next bullet."""
    m = re.search(rf"^- \*\*{re.escape(title)}.*?(?=^- \*\*|^## )", _text(), re.M | re.S)
    assert m, f"README has no Measured item '{title}'"
    return " ".join(m.group(0).split())


def _tour() -> list[str]:
    """The commands of the five-minute tour's code block, comments stripped."""
    block = re.search(r"## A five-minute tour\s+```bash\n(.*?)```", _text(), re.S)
    assert block, "README has no five-minute tour"
    return [ln.split("  #")[0].strip() for ln in block.group(1).splitlines() if ln.startswith("regress ")]


@cache
def _bundle(pattern: str) -> dict[str, Any]:
    found = headline(pattern.removeprefix("benchmarks/headline/"))
    assert len(found) == 1, f"README's {pattern} names {len(found)} files, not one"
    data: dict[str, Any] = json.loads(found[0].read_text())
    return data


def _close(stated: str, actual: float) -> bool:
    """`stated` is `actual` written to its own digits (half a unit of its last digit, rounding
    ties either way)."""
    digits = len(stated.split(".")[1]) if "." in stated else 0
    return abs(float(stated) - actual) <= 0.5 * 10**-digits + 1e-9


def _check_geomeans(item: str, bundle: dict[str, Any]) -> None:
    geo = stored_geomean(bundle["run"]["summary"])
    stated = re.search(r"\*\*([\d.]+)× \((\w+)\), ([\d.]+)× \((\w+)\), ([\d.]+)× \((\w+)\)\*\*", item)
    assert stated, "no geomean triple against cuDNN"
    values = stated.groups()
    for value, mode in zip(values[::2], values[1::2], strict=True):
        assert _close(value, geo[mode]["sdpa_cudnn"]), f"{mode}: README {value}, bundle {geo[mode]}"
    flash = re.search(r"([\d.]+)–([\d.]+)× SDPA-flash", item)
    assert flash, "no SDPA-flash range"
    lo, hi = (geo[m]["sdpa_flash"] for m in (min(MODES, key=lambda m: geo[m]["sdpa_flash"]),
                                              max(MODES, key=lambda m: geo[m]["sdpa_flash"])))  # fmt: skip
    assert _close(flash.group(1), lo) and _close(flash.group(2), hi), (flash.groups(), lo, hi)


def _path_in(item: str) -> str:
    m = re.search(r"`(benchmarks/headline/[^`]+\.json)`", item)
    assert m, "the item names no committed bundle"
    return m.group(1)


def _max_ulp(bundle: dict[str, Any]) -> dict[str, float]:
    worst: dict[str, float] = {}
    for r in bundle["results"]:
        v = r["metrics"].get("scaled_ulp_max")
        if r["suite"] == "ulp" and isinstance(v, int | float):
            worst[r["params"]["mode"]] = max(worst.get(r["params"]["mode"], 0.0), float(v))
    return worst


def test_the_two_gpu_h200_figures_are_its_bundles() -> None:
    item = _item("H200, two GPUs")
    bundle = _bundle(_path_in(item))
    cases = re.search(r"(\d+) cases", item)
    assert cases and int(cases.group(1)) == len(bundle["results"])
    assert "all pass" in item and summarise_counts(bundle) == {"pass": len(bundle["results"])}
    _check_geomeans(item, bundle)
    ulp = re.search(r"max scaled ULP ([\d.]+) \(rtne/rtna\) and ([\d.]+) \(rtz\)", item)
    worst = _max_ulp(bundle)
    assert (
        ulp and _close(ulp.group(1), max(worst["rtne"], worst["rtna"])) and _close(ulp.group(2), worst["rtz"])
    )


def test_the_one_gpu_h200_headline_is_its_bundle() -> None:
    item = _item("H200, one GPU, the full nightly")
    bundle = _bundle(_path_in(item))
    n = len(bundle["results"])
    assert f"{n} cases" in item and f"all {n} pass" in item
    assert summarise_counts(bundle) == {"pass": n}
    _check_geomeans(item, bundle)


def summarise_counts(bundle: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in bundle["results"]:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out


def test_the_cpu_case_counts_are_the_plans() -> None:
    """What `regress nightly` and `--quick` run on the CPU, from the planner itself."""
    line = _item("CPU")
    m = re.search(r"`regress nightly` [\d.]+ s for (\d+) cases, `--quick` [\d.]+ s for (\d+)", line)
    assert m, "README's CPU line changed its form: update this test with it"
    full = len(plan_cases(NightlyOptions(backend="cpu"), "cpu", "cpu"))
    quick = len(plan_cases(NightlyOptions(backend="cpu", quick=True), "cpu", "cpu"))
    assert (int(m.group(1)), int(m.group(2))) == (full, quick), (
        f"README says {m.groups()}; the plans: {full}, {quick}"
    )


def test_the_tour_names_runs_as_placeholders() -> None:
    """`runs show 01a2` failed as soon as two runs existed (every id starts with 01a2)."""
    for cmd in _tour():
        words = shlex.split(cmd)
        if words[:3] == ["regress", "runs", "show"]:
            assert re.fullmatch(r"[A-Z_]+", words[3]), (
                f"{cmd!r}: name the run as RUN (from `regress runs list`)"
            )
        if words[:3] == ["regress", "gate", "--ab"]:
            assert {"--run", "--alternating", "--baseline-stack"} & set(words), cmd


def test_the_tour_imports_the_headline_bundles_and_its_site_shows_them() -> None:
    """The tour's import globs (as bash expands them, no globstar) take in the bundles Measured
    quotes, and the one-GPU headline is its stack's latest run among them: the run the site's
    index shows (main's tour imported only the top level, and the site showed 1.027×)."""
    imported: list[str] = []
    for cmd in _tour():
        words = shlex.split(cmd)
        if words[:2] == ["regress", "import"]:
            for word in words[2:]:
                if not word.startswith("-"):
                    imported += sorted(glob.glob(str(ROOT / word)))
    assert imported, "the tour imports nothing"
    headline = str(ROOT / _path_in(_item("H200, one GPU, the full nightly")))
    two_gpu = sorted(glob.glob(str(ROOT / _path_in(_item("H200, two GPUs")))))
    assert headline in imported and set(two_gpu) <= set(imported)
    runs = []
    for path in imported:
        b = json.loads(Path(path).read_text())
        if isinstance(b, dict) and "run" in b and "stack" in b and not b["run"].get("is_drill"):
            runs.append((b["stack"]["digest"], b["run"]["started_at"], path))
    digest = json.loads(Path(headline).read_text())["stack"]["digest"]
    latest = max((r for r in runs if r[0] == digest), key=lambda r: r[1])
    assert latest[2] == headline, f"the site would show {latest[2]}"


@pytest.mark.slow  # collects the whole suite (~30 s here)
def test_the_test_count_is_the_suites() -> None:
    """README's "N tests" is what plain `pytest` collects, to within 10 % above it (a floor that
    stays true while tests are added, flagged once it is 10 % stale)."""
    m = re.search(r"\((?:over )?([\d,]+) tests", _text())
    assert m, "README states no test count"
    stated = int(m.group(1).replace(",", ""))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    tail = re.search(r"(\d+)(?:/\d+)? tests? collected", done.stdout)
    assert tail, done.stdout[-2000:]
    collected = int(tail.group(1))
    assert stated <= collected < stated * 1.10, (
        f"README says {stated} tests; plain pytest collects {collected}"
    )


def test_the_stored_summary_is_what_summarise_writes() -> None:
    """The figures above read the stored summary: it is `summarise`'s own (one place)."""
    from regress.facts.results import CaseResult

    bundle = _bundle(_path_in(_item("H200, one GPU, the full nightly")))
    results = [CaseResult.from_dict(r) for r in bundle["results"]]
    again = summarise(results)
    stored = bundle["run"]["summary"]
    assert again["results"] == stored["results"] and again["suites"] == stored["suites"]
    assert stored_geomean(again) == stored_geomean(stored)


def test_the_mi300x_predictions_are_the_committed_table() -> None:
    """The MI300X item's predicted ratios (point [low, high] per mode against AITER v3, and against
    MoonMath) are the summary of the committed model table it names."""
    item = _item("MI300X")
    m = re.search(r"`(regress/facts/data/mi300x/predicted-[^`]+\.jsonl)`", item)
    assert m and "predicts" in item, "the MI300X item names no committed predicted table"
    table = mi300x_predicted_dir() / Path(m.group(1)).name  # the package's one reader of the folder
    lines = [json.loads(x) for x in table.read_text().splitlines() if x.strip()]
    band = next(x for x in lines if x.get("summary"))["ours_vs_peers_band"]
    triple = re.search(r"at ([\d.]+) \[([\d.]+), ([\d.]+)\] / ([\d.]+) \[([\d.]+), ([\d.]+)\] / "
                       r"([\d.]+) \[([\d.]+), ([\d.]+)\]× AITER v3 \(rtne / rtna / rtz\)", item)  # fmt: skip
    assert triple, "no point [low, high] triple against AITER"
    for i, mode in enumerate(MODES):
        got = band[f"aiter_{mode}"]
        for stated, key in zip(triple.groups()[3 * i : 3 * i + 3], ("geomean", "low", "high"), strict=True):
            assert _close(stated, got[key]), (mode, key, stated, got[key])
    mm = re.search(r"([\d.]+) \[([\d.]+), ([\d.]+)–([\d.]+)\]× MoonMath", item)
    assert mm, "no band against MoonMath"
    peer = [band[f"moonmath_{mode}"] for mode in MODES]
    assert all(_close(mm.group(1), p["geomean"]) and _close(mm.group(2), p["low"]) for p in peer)
    assert _close(mm.group(3), min(p["high"] for p in peer)) and _close(
        mm.group(4), max(p["high"] for p in peer)
    )


def test_the_gqa_decode_speedups_are_the_committed_tables() -> None:
    """The serving paragraph's predicted GQA-decode speedups (rtna, ours on the v2 kernel over ours on
    the dense rows) are the ratios of the two committed model tables it names."""
    text = " ".join(_text().split())
    m = re.search(
        r"predicted ([\d.]+)× \(16 sequences × 32/8 heads, 8k cache\) and ([\d.]+)× \(one sequence\) faster "
        r"on MI300X than on the v2 kernel \(`regress/facts/data/mi300x/(serving-[^`]+\.jsonl)` against "
        r"`…(-v2-kernel-[^`]+\.jsonl)`",
        text,
    )
    assert m, "README states no GQA decode speedup with its tables"
    now_name = m.group(3)
    before_name = now_name.split("-2026")[0] + m.group(4)

    def ms(name: str, b: int) -> float:
        rows = [json.loads(x) for x in (mi300x_predicted_dir() / name).read_text().splitlines() if x.strip()]
        (r,) = [
            r
            for r in rows
            if r.get("kernel") == "ours" and r["mode"] == "rtna" and r["shape"][:4] == [b, 32, 1, 8192]
        ]
        return float(r["predicted_ms"])

    for stated, b in ((m.group(1), 16), (m.group(2), 1)):
        assert _close(stated, ms(before_name, b) / ms(now_name, b)), (stated, b)


def test_the_issue40_close_figures_are_its_campaign() -> None:
    """README's close item: the decode ratios against cuDNN (call 3, two-arm runs), the suites' count
    (call 2's bundle) and the A/A spread at the flagged shape (call 4), from the archive it names."""
    import gzip

    from committed import members, read

    item = _item("H200, issue 40's close")
    assert "benchmarks/campaigns/h200-issue40-close.tar.xz" in item
    rows = json.loads(gzip.decompress(read("h200-issue40-close.tar.xz:call3/decode.json.gz")))["rows"]
    vs = {}
    for r in rows:
        vs.setdefault(r["shape"].split(",")[0].strip("("), []).append(r["ours_vs_sdpa_cudnn"])
    assert f"{min(vs['1']):.2f}× cuDNN for one sequence" in item
    assert f"{min(vs['4']):.2f}× for four" in item
    assert f"{min(vs['16']):.3f}× for sixteen" in item and max(vs["16"]) < 1.0
    v2 = [r["ours_speed_vs_v2"] for r in rows if r["shape"].startswith("(1,")]
    assert f"({min(v2):.1f}×" in item
    (nightly,) = [
        json.loads(gzip.decompress(read(f"h200-issue40-close.tar.xz:{m}")))
        for m in members("h200-issue40-close.tar.xz", "call2/nightly-*.json.gz")
    ]
    statuses = [r["status"] for r in nightly["results"]]
    assert f"{statuses.count('pass')} of {len(statuses)} pass" in item
    control = json.loads(gzip.decompress(read("h200-issue40-close.tar.xz:call4/ab_control.json.gz")))
    aa = [
        r["second_over_first"] - 1
        for r in control["rows"]
        if r["pair"] in ("old:old2", "new:new2") and r["shape"] == [2, 40, 1024, 77]
    ]
    assert f"{100 * min(aa):.1f}–{100 * max(aa):.1f} % slower" in item


def _gpu_tier_passed(call: str) -> int:
    """The passed count of a sm90-stair-carry call's GPU tier (its logs.tgz's stair-tests.log), which
    must have no failure."""
    import io
    import tarfile

    from committed import read

    with tarfile.open(fileobj=io.BytesIO(read(f"sm90-stair-carry.tar.xz:{call}/logs.tgz"))) as logs:
        f = logs.extractfile("stair-tests.log")
        assert f is not None
        last = f.read().decode().strip().splitlines()[-1]
    m = re.search(r"(\d+) passed", last)
    assert m and "failed" not in last, last
    return int(m.group(1))


def _carry_results(call: str, tmp_path: Path) -> list[Any]:
    """A sm90-stair-carry call's perf results, read by the harness that wrote them (h200_v2)."""
    from committed import extract

    return [
        r
        for r in _h200_v2().load_results(
            extract(f"sm90-stair-carry.tar.xz:{call}/v2-results.json.gz", tmp_path)
        )
        if r.case.suite == "perf"
    ]


def _h200_v2() -> Any:
    """benchmarks/h200/h200_v2.py, the harness that wrote the campaign's results (imported on use)."""
    harness = str(ROOT / "benchmarks" / "h200")
    if harness not in sys.path:
        sys.path.insert(0, harness)
    import h200_v2

    return h200_v2


def test_the_tileinfo_carry_figures_are_its_campaign(tmp_path: Path) -> None:
    """README's carry item: the A/B range of the fixed-length causal kernels against a32f366 (the
    harness's own ab_speed), the top-left families against cuDNN and causal TFLOP/s at S >= 8k over
    the archive's three timed calls, and the GPU tier's count from call 4's log."""
    item = " ".join(_item("The producer carries the TileInfo").split())
    assert "benchmarks/campaigns/sm90-stair-carry.tar.xz" in item
    causal = [
        r
        for call in ("call1", "call2", "call4")
        for r in _carry_results(call, tmp_path / call)
        if r.metrics.get("plan_kind") == "sm90_v2_causal"
    ]
    ab = [_h200_v2().ab_speed(r) for r in causal]
    cudnn = [r.metrics["speedup_vs_sdpa_cudnn"] for r in causal if r.case.params["mask"] == "causal_top_left"]
    tflops = [r.metrics["tflops"] for r in causal if r.case.params["sq"] >= 8192]
    assert f"run {min(ab):.3f}–{max(ab):.3f}× as fast" in item
    assert f"read {min(cudnn):.3f}–{max(cudnn):.3f}× cuDNN" in item
    assert f"S ≥ 8k {min(tflops):.0f}–{max(tflops):.0f} TFLOP/s" in item
    assert f"({_gpu_tier_passed('call4')} passed)" in item


def test_the_h200_exact_causal_figures_are_its_campaign(tmp_path: Path) -> None:
    """README's H200 item: call 7's GPU tier count, causal top-left range and the causal group's
    geomeans per mode against cuDNN (h200_v2's group, regress.facts.stats' geomean), causal TFLOP/s
    at S >= 8k, the decode and varlen ranges, and call 8's decode range, all from the archive it names."""
    import gzip

    from committed import read

    from regress.facts.stats import geomean

    item = " ".join(_item("H200, the exact causal default").split())
    rows = _carry_results("call7", tmp_path)
    causal = [r for r in rows if _h200_v2().group_of(r) == "causal"]
    top_left = [
        r.metrics["speedup_vs_sdpa_cudnn"] for r in causal if r.case.params["mask"] == "causal_top_left"
    ]
    assert f"top-left {min(top_left):.3f}–{max(top_left):.3f}× cuDNN" in item
    geo = [
        geomean([r.metrics["speedup_vs_sdpa_cudnn"] for r in causal if r.case.params["mode"] == mode])
        for mode in MODES
    ]
    assert f"(geomean {min(geo):.3f}–{max(geo):.3f} per mode)" in item
    tf = [r.metrics["tflops"] for r in causal if r.case.params["sq"] >= 8192]
    assert f"S ≥ 8k {min(tf):.0f}–{max(tf):.0f} TFLOP/s" in item
    dec = [r.metrics["speedup_vs_sdpa_cudnn"] for r in rows if _h200_v2().group_of(r) == "decode"]
    assert f"GQA decode {min(dec):.3f}–{max(dec):.3f}× cuDNN" in item
    var = [r.metrics["speedup_vs_fa2_varlen"] for r in rows if _h200_v2().group_of(r) == "varlen"]
    assert f"varlen {min(var):.3f}–{max(var):.3f}× FlashAttention-2" in item
    assert f"the GPU tier {_gpu_tier_passed('call7')} passed" in item
    decode = json.loads(gzip.decompress(read("sm90-stair-carry.tar.xz:call8/decode.json.gz")))["rows"]
    vs = [r["ours_vs_sdpa_cudnn"] for r in decode]
    assert f"read {min(vs):.3f}–{max(vs):.3f}× (call 8)" in item
