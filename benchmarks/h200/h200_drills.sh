#!/usr/bin/env bash
# Fire-drill table on the lent H200 (issue 14): clean/clean, then slowdown drills of 2, 3, 5 and 10 %,
# each a quick perf night on the CUDA backend stored in one SQLite database, and the table: per drill
# the measured cost per case (drill build vs the clean build timed interleaved in the same rounds)
# against the request, and the gate's verdict against the last clean night. Needs the carried wheels
# folder (benchmarks/h200/device_env.sh). Each drill is its own nvcc build (about a minute), so the
# work splits over calls on the same warm machine: the database and the build cache stay in
# regress-out/ (ignored by git, kept between calls).
#   run(command="PHASE=clean bash benchmarks/h200/h200_drills.sh", carry=["wheels"])
#   run(command="PHASE=drills DRILLS='2 3' bash benchmarks/h200/h200_drills.sh", carry=["wheels"])
#   run(command="PHASE=drills DRILLS='5 10' bash benchmarks/h200/h200_drills.sh", carry=["wheels"])
# PHASE=all (default) does everything in one call when time allows.
set -uo pipefail
source benchmarks/h200/device_env.sh
DIR=${DB_DIR:-regress-out/h200-drills}
DB="sqlite:///$PWD/$DIR/drills.db"
mkdir -p "$DIR"
night() {
  timeout "${NIGHT_TIMEOUT:-300}" python3 -m regress nightly --backend cuda --stack h200-cuda13.0 --allow-drift \
    --quick --suites perf --db "$DB" --out "$DIR/out" --trigger device-run --runner h200-lent "$@" \
    2>&1 | tail -"${TAIL:-6}"
  echo "nightly $* exit: ${PIPESTATUS[0]}"
}
PHASE=${PHASE:-all}
if [ "$PHASE" = clean ] || [ "$PHASE" = all ]; then
  night
  night
fi
if [ "$PHASE" = drills ] || [ "$PHASE" = all ]; then
  for pct in ${DRILLS:-2 3 5 10}; do
    TAIL=12 night --inject "slowdown=$pct"
  done
fi
python3 benchmarks/service/fire_drills.py table --db "$DB" | tee "$OUT/drill-table.txt"
cp "$DIR/drills.db" "$OUT/" 2>/dev/null || true
