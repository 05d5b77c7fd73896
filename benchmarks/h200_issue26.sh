#!/usr/bin/env bash
# One device call on the lent H200 for issue 26's close: (1) the product's full CUDA nightly (every
# suite, the full perf set, all modes; one SQLite database), its perf table with the geomean and
# each shape family's lower layout per mode; (2) the in-kernel merge build (-DRA_CUDA_MERGE_KERNEL=0,
# "mk0") beside the default ("new") on the decode and short-query shapes: h200_split.py's checks
# (fp64 ULP, NaN/Inf, coverage, bits new = mk0 on the rule's splits, determinism, CUDA graph) and
# its interleaved timing against cuDNN, eager and under graphs; (3) ncu on the weakest shapes, time
# allowing. The bench libraries build in the background while the nightly builds its own.
# Needs the carried wheels (benchmarks/device_env.sh):
#   run(command="cd .devstage/h200 && ln -sfn ../../wheels wheels && bash benchmarks/h200_issue26.sh",
#       carry=[".devstage/h200", "wheels"])
set -uo pipefail
T0=$(date +%s)
left() { echo $((${CALL_S:-585} - ($(date +%s) - T0))); }
source benchmarks/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export H200_LIBS=${H200_LIBS:-"new=;mk0=-DRA_CUDA_MERGE_KERNEL=0"}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
python3 benchmarks/h200_split.py build >/tmp/prebuild.log 2>&1 &
PREBUILD=$!

# (1) the full nightly
S=$(date +%s)
timeout "${NIGHTLY_TIMEOUT:-450}" python3 -m regress nightly --backend cuda --stack h200-cuda13.0 --allow-drift \
  --deadline "${NIGHTLY_DEADLINE:-420}" --db "sqlite:////tmp/full.db" --out /tmp/full --trigger device-full \
  --runner h200-lent >"$OUT/nightly.log" 2>&1
echo "full nightly exit $? after $(($(date +%s) - S)) s"
wait "$PREBUILD"
echo "prebuild exit $? ($(tail -1 /tmp/prebuild.log))"
for b in /tmp/full/bundles/*.json; do
  cp "$b" "$OUT/"
  python3 benchmarks/perf_table.py "$b" >"$OUT/perf_table.txt" 2>&1
done
grep -v -E "^\s*$" "$OUT/nightly.log" | tail -12

# (2) mk0 beside new, decode and short-query shapes
B=$(($(left) - 130))
if [ "$B" -gt 60 ]; then
  [ "$B" -gt 200 ] && B=200
  mkdir -p /tmp/bench
  H200_SHAPES=${H200_SHAPES:-targets,edges} H200_OVERHEAD=${H200_OVERHEAD:-"1,32,1,8192;8,32,1,4096"} \
    timeout "$B" python3 benchmarks/h200_split.py all --out /tmp/bench >"$OUT/bench.log" 2>&1
  echo "bench exit $? (limit $B s)"
  cp /tmp/bench/results.json "$OUT/bench-results.json" 2>/dev/null
else
  echo "bench skipped: $(left) s left"
fi

# (3) ncu on the weakest shapes: new, mk0 and cuDNN
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
N=$(($(left) - 15))
if [ -n "$NCU" ] && [ "$N" -gt 40 ]; then
  H200_NCU_SHAPES=${H200_NCU_SHAPES:-"1,32,1,8192;256,32,128,128;2,16,8192,8192"} timeout "$N" "$NCU" \
    --clock-control none -k regex:"attn_|sdpa|fmha|cudnn" -c 16 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section WarpStateStats \
    --section Occupancy -f -o /tmp/prof python3 benchmarks/h200_split.py ncu-target >/tmp/ncu.log 2>&1
  echo "ncu exit $? (limit $N s)"
  "$NCU" -i /tmp/prof.ncu-rep --page details >"$OUT/ncu.txt" 2>&1
  grep -E "^  [a-z_A-Z].*\(|^ +(Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput)" \
    "$OUT/ncu.txt" | sed -E 's/ +/ /g' | cut -c1-110
else
  echo "ncu skipped: $(left) s left"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv,noheader
echo "== call wall $(($(date +%s) - T0)) s =="
grep -E "built|checks|FAIL|failed|graph:|\[" "$OUT/bench.log" 2>/dev/null | cut -c1-300 | head -20
cat /tmp/bench/table.txt 2>/dev/null
grep -A4 "geomean vs" "$OUT/perf_table.txt"
grep -E "below|^suites" "$OUT/perf_table.txt"
