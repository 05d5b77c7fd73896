#!/usr/bin/env bash
# The gate's calibration (issue 23): CLEAN clean quick perf nights, then slowdown drills, all in one
# SQLite database, gated in both modes (benchmarks/service/gate_calibration.py prints the table):
#   cross-night: each clean night vs the one before; each drill vs the last and vs the first clean night;
#   A/B: every run's own two builds, timed in the same rounds (clean nights: --compare-build clean,
#        the clean build against itself; drills: the drill build against the clean build, the default).
# Every night has the same round structure (the A/B phase comes after the normal rounds).
#
# H200, one device call (needs the carried wheels, benchmarks/h200/device_env.sh):
#   run(command="cd .devstage/gate && bash benchmarks/service/gate_calibration.sh", carry=[".devstage/gate"])
# This CPU (with load beside it):
#   BACKEND=cpu DRILLS="10 30" TRIES=10 bash benchmarks/service/gate_calibration.sh
# The drill builds are made first, in parallel, into the build cache the nights then hit.
set -uo pipefail
BACKEND=${BACKEND:-cuda}
CLEAN=${CLEAN:-10}
TRIES=${TRIES:-1}
if [ "$BACKEND" = cuda ]; then
  source benchmarks/h200/device_env.sh
  STACK=${STACK:-h200-cuda13.0}
  DRILLS=${DRILLS:-2 3 5 10}
else
  export PYTHONPATH=$PWD
  OUT=${OUT:-regress-out/gate-calibration-cpu}
  mkdir -p "$OUT"
  STACK=${STACK:-}
  DRILLS=${DRILLS:-10 30}
fi
DIR=${DB_DIR:-regress-out/gate-calibration-$BACKEND}
rm -rf "$DIR" && mkdir -p "$DIR"
DB="sqlite:///$PWD/$DIR/cal.db"
STARTED=$(date +%s)
BUDGET_S=${BUDGET_S:-430}  # stop starting nights after this many seconds (the device call is < 8 min)

prebuild() {  # the clean build and every drill build, in parallel, before the first night
  python3 - "$BACKEND" "$STACK" $DRILLS <<'EOF'
import sys
from concurrent.futures import ThreadPoolExecutor
from regress.native.build import build_kernel
from regress.machine.stack import load_pin
backend, stack, drills = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
flags = tuple(load_pin(stack).extra_flags) if stack else ()
jobs = [None, *drills]
with ThreadPoolExecutor(len(jobs)) as ex:
    arts = list(ex.map(lambda p: build_kernel(backend, extra_flags=flags, inject={"slowdown_pct": p} if p else None), jobs))
print("prebuilt:", ", ".join(f"{p or 'clean'} {a.path.name}" for p, a in zip(jobs, arts)))
EOF
}

night() {
  local left=$((BUDGET_S - ($(date +%s) - STARTED)))
  if [ "$left" -lt 25 ]; then
    echo "skipped (budget): $*"
    return
  fi
  timeout "${NIGHT_TIMEOUT:-90}" python3 -m regress nightly --backend "$BACKEND" ${STACK:+--stack "$STACK"} --allow-drift \
    --quick --suites perf --db "$DB" --out "$DIR/out" --trigger calibration --runner "calibration-$BACKEND" "$@" \
    >"$DIR/night.log" 2>&1
  echo "night $* exit $? ($(($(date +%s) - STARTED)) s)"
}

prebuild 2>&1 | tail -2
NDRILLS=$(($(echo $DRILLS | wc -w) * TRIES))
CLEAN_START=$(date +%s)
for i in $(seq "$CLEAN"); do
  night --compare-build clean
  # Leave room for every drill: stop the clean nights early rather than lose a drill (said in the log).
  per=$((($(date +%s) - CLEAN_START) / i))
  if [ $(($(date +%s) - STARTED + (NDRILLS + 1) * per)) -gt "$BUDGET_S" ] && [ "$i" -lt "$CLEAN" ]; then
    echo "stopping after $i clean nights (about $per s a night; $NDRILLS drills to go)"
    break
  fi
done
for t in $(seq "$TRIES"); do
  for pct in $DRILLS; do night --inject "slowdown=$pct"; done
done
tail -5 "$DIR/night.log"
mkdir -p "$OUT/bundles"
cp "$DIR"/out/bundles/*.json "$OUT/bundles/" 2>/dev/null
cp "$DIR/cal.db" "$OUT/" 2>/dev/null
python3 benchmarks/service/gate_calibration.py --db "$DB" --json "$OUT/gates.json" | tee "$OUT/table.md"
echo "total $(($(date +%s) - STARTED)) s"
