#!/usr/bin/env bash
# Issue 42 item 1, once on the device: SIGTERM 40 s into `regress nightly --quick` on the H200 ends
# the run like its deadline. One call: nightly in the background, SIGTERM at 40 s, then the facts.
# Expect: exit 143, one "cancelled by SIGTERM: N of M cases ran, ..." line, no traceback, the run
# 'cancelled', every planned case with a status, the bundle written (status cancelled).
#   bash benchmarks/h200/h200_sigterm.sh            (on nvidia-h200; writes under $OUT or /tmp)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp}/sigterm
rm -rf "$OUT" && mkdir -p "$OUT"
DB="sqlite:///$OUT/r.db"
python -m regress nightly --backend cuda --stack h200-cuda13.0 --allow-drift --quick \
  --db "$DB" --out "$OUT/out" >"$OUT/stdout.txt" 2>"$OUT/stderr.txt" &
pid=$!
sleep "${SIGTERM_AFTER_S:-40}"
kill -TERM "$pid"
t0=$(date +%s.%N)
wait "$pid"; rc=$?
t1=$(date +%s.%N)
echo "--- stderr (last 5 lines)"; tail -5 "$OUT/stderr.txt"
echo "--- stdout (last 3 lines)"; tail -3 "$OUT/stdout.txt"
tb=$(grep -c Traceback "$OUT/stderr.txt" || true)
python - "$OUT" "$rc" "$t0" "$t1" "$tb" <<'PY'
import json, sqlite3, sys
from pathlib import Path
out, rc, t0, t1, tb = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
con = sqlite3.connect(out / "r.db")
(rid, status, message), = con.execute("SELECT id, status, message FROM runs")
counts = dict(con.execute("SELECT status, count(*) FROM results GROUP BY status"))
bundle = json.loads((out / "out" / "bundles" / f"{rid}.json").read_text())
print("| exit | s from SIGTERM to exit | tracebacks | run status | results by status | bundle status |")
print("|---|---|---|---|---|---|")
print(f"| {rc} | {t1 - t0:.1f} | {tb} | {status} | {counts} | {bundle['run']['status']} |")
print(message)
PY
