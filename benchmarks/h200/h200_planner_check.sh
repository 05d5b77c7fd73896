#!/usr/bin/env bash
# One device call (issues 37, 40, 42): the merged tree's sm_90a library on the lent H200 after the
# host planner (kernel/cuda/plan.h) took over launch() and ABI v2 arrived. Builds the library, runs the
# GPU-marked tests (the planner's workspace and fallback paths, threads, streams), the quick CUDA
# nightly (every suite; the v2 cases must be skips naming RA_ERR_UNSUPPORTED), then the SIGTERM check
# (benchmarks/h200/h200_sigterm.sh). Bundles and logs land in $OUT; a short table last.
#   run(command="bash benchmarks/h200/h200_planner_check.sh", carry=["wheels"])
set -uo pipefail
source benchmarks/h200/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
T0=$(date +%s)
timeout 420 python3 -m regress build --backend cuda >"$OUT/build.log" 2>&1
build_rc=$?
echo "build exit $build_rc after $(($(date +%s) - T0)) s"; tail -3 "$OUT/build.log"
T0=$(date +%s)
timeout 240 python3 -m pytest -q -m "" -p no:cacheprovider tests/kernel/test_cuda_threads_gpu.py \
  tests/kernel/test_cuda_fallback_gpu.py tests/suites/test_suites_gpu.py >"$OUT/gpu-tests.log" 2>&1
tests_rc=$?
echo "gpu tests exit $tests_rc after $(($(date +%s) - T0)) s: $(tail -1 "$OUT/gpu-tests.log")"
T0=$(date +%s)
timeout 300 python3 -m regress nightly --backend cuda --stack h200-cuda13.0 --allow-drift --quick \
  --runner h200-lent --trigger device-quick --db "sqlite:///$OUT/quick.db" --out "$OUT/quick" >"$OUT/quick.log" 2>&1
quick_rc=$?
echo "quick nightly exit $quick_rc after $(($(date +%s) - T0)) s"; tail -4 "$OUT/quick.log"
python3 - "$OUT"/quick/bundles/*.json <<'PY'
import collections, json, sys
for path in sys.argv[1:]:
    b = json.load(open(path))
    by = collections.Counter((r["suite"], r["status"]) for r in b["results"])
    plans = collections.Counter(r["metrics"].get("plan_kind") for r in b["results"] if r["suite"] in ("perf", "e2e"))
    skips = [r for r in b["results"] if r["status"] == "skip"]
    print("quick bundle", b["run"]["status"], dict(by))
    print("plans", dict(plans))
    print("skip reasons", collections.Counter((r.get("message") or "")[:90] for r in skips).most_common(3))
    g = b["run"].get("summary", {}).get("geomean_speedup") or {}
    print("geomean", json.dumps(g)[:300])
PY
mkdir -p "$OUT/bundles" && cp "$OUT"/quick/bundles/*.json "$OUT/bundles/" 2>/dev/null
rm -rf "$OUT/quick" "$OUT"/*.db
OUT=$OUT bash benchmarks/h200/h200_sigterm.sh 2>&1 | tail -12
cp "$OUT"/sigterm/out/bundles/*.json "$OUT/bundles/" 2>/dev/null
rm -rf "$OUT/sigterm/out" "$OUT/sigterm/r.db"
echo "| build | gpu tests | quick nightly |"; echo "|---|---|---|"; echo "| $build_rc | $tests_rc | $quick_rc |"
