#!/usr/bin/env bash
# One device call on the lent H200: the landed tree's quick nightly on the CUDA backend (every suite,
# the directed rounding cases included), then the planted rounding swap (issue 22): a build whose
# rtne and rtz are exchanged must fail the quick ULP suite. Prints both exits and the directed
# rounding rows of each bundle; bundles and logs land in $OUT. Needs the carried wheels folder:
#   run(command="bash benchmarks/h200/h200_quick_and_swap.sh", carry=["wheels"])
set -uo pipefail
source benchmarks/h200/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
common=(--backend cuda --stack h200-cuda13.0 --allow-drift --quick --runner h200-lent)
START=$(date +%s)
timeout 300 python3 -m regress nightly "${common[@]}" --db "sqlite:///$OUT/quick.db" --out "$OUT/quick" \
  --trigger device-quick >"$OUT/quick.log" 2>&1
echo "clean quick nightly exit: $? after $(($(date +%s) - START)) s"
START=$(date +%s)
timeout 240 python3 -m regress nightly "${common[@]}" --suites ulp --inject swap_rounding=rtne:rtz \
  --db "sqlite:///$OUT/swap.db" --out "$OUT/swap" --trigger device-drill >"$OUT/swap.log" 2>&1
echo "swap_rounding=rtne:rtz quick ulp exit: $? after $(($(date +%s) - START)) s"
echo "tracebacks: $(cat "$OUT"/quick.log "$OUT"/swap.log | grep -c Traceback)"
python3 - "$OUT"/quick/bundles/*.json "$OUT"/swap/bundles/*.json <<'PY'
import collections, json, sys
for path in sys.argv[1:]:
    b = json.load(open(path))
    by = collections.Counter((r["suite"], r["status"]) for r in b["results"])
    print(path.split("/")[-3], b["run"]["status"], "exit", b["run"]["exit_code"], dict(by))
    rounding = [r for r in b["results"] if "round" in r["name"]]
    bad = [r["name"] for r in rounding if r["status"] != "pass"]
    print(f"  directed rounding rows: {len(rounding)}, not passing: {len(bad)} {bad[:6]}")
PY
mkdir -p "$OUT/bundles" && cp "$OUT"/quick/bundles/*.json "$OUT"/swap/bundles/*.json "$OUT/bundles/" 2>/dev/null
rm -rf "$OUT/quick" "$OUT/swap" "$OUT"/*.db
