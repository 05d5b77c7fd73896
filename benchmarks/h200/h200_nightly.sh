#!/usr/bin/env bash
# One device call on the lent H200: the project's own `regress nightly --backend cuda` (all suites,
# stored in SQLite), the live stack fingerprint, a compute-sanitizer pass, and the perf table last.
# Needs the carried wheels folder (benchmarks/h200/device_env.sh):
#   run(command="bash benchmarks/h200/h200_nightly.sh", carry=["wheels"])
set -uo pipefail
source benchmarks/h200/device_env.sh
nvidia-smi --query-gpu=name,driver_version,vbios_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 -m regress stack show --backend cuda --json > "$OUT/stack.json" && head -c 1500 "$OUT/stack.json"; echo
SUITES=${SUITES:-determinism,ulp,perf,e2e}  # GPUS=all shards over every GPU
timeout "${NIGHTLY_TIMEOUT:-420}" python3 -m regress nightly --backend cuda --stack h200-cuda13.0 --allow-drift \
  --suites "$SUITES" --db "sqlite:///$OUT/h200.db" --out "$OUT" --trigger device-run --runner h200-lent \
  ${GPUS:+--gpus "$GPUS"} \
  2>&1 | tee "$OUT/nightly.log" | grep -v -E "^\s*$" | tail -40
echo "nightly exit: ${PIPESTATUS[0]}"
if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    timeout 120 compute-sanitizer --tool "$tool" --print-limit 5 python3 benchmarks/h200/sanitize_case.py \
      > "$OUT/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-$tool.log" | tail -1)"
  done
fi
for b in "$OUT"/bundles/*.json; do python3 benchmarks/h200/perf_table.py "$b"; cp "$b" "$OUT/"; done
