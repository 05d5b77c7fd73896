#!/usr/bin/env bash
# The GPU hang drill of issue 23 on the lent H200, in one device call: the quick determinism and ULP
# suites with a kernel whose launches with Sq = 1024 never retire, on one GPU, each case limited to
# CASE_TIMEOUT s (10 by default, as in the run that once gave up after 4 replacements). Prints the
# nightly's own summary, whether a traceback appeared, and a table of status by query length from
# the bundle, which lands in $OUT. Needs the carried wheels folder (benchmarks/h200/device_env.sh):
#   run(command="bash benchmarks/h200/h200_hang_drill.sh", carry=["wheels"])
# Run 2026-12-01 with CASE_TIMEOUT=6 (to fit the device budget) and a carried buildcache: 134 s of
# device wall, bundle and log in benchmarks/campaigns/h200-hang-drill.tar.xz:.
# A build cache made here with the same nvcc (`regress build --backend cuda --stack h200-cuda13.0
# --inject hang=1024 --cache-dir buildcache`) may be carried as ./buildcache to skip the minute of
# nvcc there; a library from it that does not load on that machine is dropped and rebuilt.
set -uo pipefail
source benchmarks/h200/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ -d buildcache ]; then
  for so in buildcache/*/*.so; do
    python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$so" 2>/dev/null ||
      { echo "cached $so does not load here: rebuilding"; rm -rf "$(dirname "$so")"; }
  done
  export REGRESS_CACHE_DIR=$PWD/buildcache
fi
START=$(date +%s)
timeout "${DRILL_TIMEOUT:-540}" python3 -m regress nightly --backend cuda --stack h200-cuda13.0 --allow-drift \
  --quick --suites determinism,ulp --inject hang=1024 --case-timeout "${CASE_TIMEOUT:-10}" \
  --db "sqlite:///$OUT/drill.db" --out "$OUT" --trigger device-drill --runner h200-lent \
  >"$OUT/drill.log" 2>&1
echo "nightly exit: $? after $(($(date +%s) - START)) s"
echo "tracebacks in the output: $(grep -c Traceback "$OUT/drill.log")"
grep -v -E "^\s*$|^  |^Thread|^Current thread|^timeout " "$OUT/drill.log" | grep -v "last step" | tail -14
python3 - "$OUT"/bundles/*.json <<'EOF'
import collections, json, re, sys
b = json.load(open(sys.argv[1]))
t = b["run"]["summary"]["timing"]
by = collections.Counter((r["suite"], r["params"].get("sq"), r["status"]) for r in b["results"])
print("suite        sq  status   cases")
for (suite, sq, st), n in sorted(by.items()):
    print(f"{suite:12} {sq:>4}  {st:8} {n:>4}")
hung = [r for r in b["results"] if r["status"] == "timeout"]
print("every timeout has Sq 1024:", all(r["params"]["sq"] == 1024 for r in hung))
print("every Sq 1024 case timed out:", all(r["status"] == "timeout" for r in b["results"] if r["params"]["sq"] == 1024))
steps = collections.Counter(m.group(1) if (m := re.search(r"last step: (\w+)", r["message"])) else "?" for r in hung)
print("last step of the timeouts:", dict(steps))
print("every timeout carries a Python stack:", all('File "' in r["message"] for r in hung))
print(f"results {len(b['results'])}, planned {b['run']['summary'].get('planned')}, run status {b['run']['status']}, exit {b['run']['exit_code']}")
print(f"timeouts {t['timeouts']}, replaced {t['replaced']}, unhealthy {t['unhealthy']}, not run {t['not_run']}, cases wall {t['cases_wall_s']} s")
starts = sorted(t["startup_s"].values())
print(f"worker start-ups (s): n={len(starts)} min {starts[0]} median {starts[len(starts) // 2]} max {starts[-1]}")
EOF
cp "$OUT"/bundles/*.json "$OUT/" 2>/dev/null || true
