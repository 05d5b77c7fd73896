#!/usr/bin/env bash
# One device call on the lent H200 for issue 15 (benchmarks/h200/h200_op.py says what is measured):
# build the default and the v2 library, check them (fp64 reference, bit equality, op, CUDA graph,
# torch.compile), time both against SDPA flash and cuDNN on the perf suite's GPU shapes, measure
# per-call overhead eager and under CUDA graphs, profile a few launches with ncu, run
# compute-sanitizer memcheck and racecheck on multi-tile shapes. Prints the summary table last. Needs the carried wheels folder (benchmarks/h200/device_env.sh).
#   run(command="bash benchmarks/h200/h200_op.sh", carry=[...])
set -uo pipefail
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
source benchmarks/h200/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout "${BENCH_TIMEOUT:-330}" python3 benchmarks/h200/h200_op.py all --out "$OUT" --skip "${SKIP:-}" \
  > "$OUT/bench.log" 2>&1
echo "bench exit $? ($(grep -c . "$OUT/bench.log") log lines)"
grep -E "built|checks|FAIL|failed|op/graph|\[" "$OUT/bench.log" | head -30
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ "${NCU_RUN:-1}" = 1 ] && [ -n "$NCU" ]; then
  timeout "${NCU_TIMEOUT:-120}" "$NCU" --clock-control none -k regex:attn_fwd_sm90 -c 8 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats -f -o "$OUT/prof" \
    python3 benchmarks/h200/h200_op.py ncu-target > "$OUT/ncu.log" 2>&1
  echo "ncu exit $?"
  "$NCU" -i "$OUT/prof.ncu-rep" --page details > "$OUT/ncu.txt" 2>&1
  "$NCU" -i "$OUT/prof.ncu-rep" --page raw --csv > "$OUT/ncu_raw.csv" 2>&1 && rm -f "$OUT/prof.ncu-rep"
  grep -E "ncu launch" "$OUT/ncu.log"
  grep -E "attn_fwd|^ +(Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Hit Rate|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued)" \
    "$OUT/ncu.txt" | sed -E 's/ +/ /g' | cut -c1-110
fi
# NCU_SOURCE=1: per-SASS-instruction stall samples of every profiled kernel (ours and cuDNN's), to
# find which instructions a latency-bound tile waits on.
if [ "${NCU_SOURCE:-0}" = 1 ] && [ -n "$NCU" ]; then
  timeout "${NCU_TIMEOUT:-150}" "$NCU" --clock-control none -k regex:"attn_fwd_sm90|sdpa|fmha|cudnn" -c "${NCU_COUNT:-12}" \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section InstructionStats \
    -f -o "$OUT/src" python3 benchmarks/h200/h200_op.py ncu-target > "$OUT/ncu_src.log" 2>&1
  echo "ncu source exit $?"
  "$NCU" -i "$OUT/src.ncu-rep" --page details --csv > "$OUT/src_details.csv" 2>&1
  "$NCU" -i "$OUT/src.ncu-rep" --page source --csv --print-source sass > "$OUT/src_sass.csv" 2> "$OUT/src_sass.err"
  echo "source page exit $? ($(wc -c < "$OUT/src_sass.csv") bytes)"; head -c 600 "$OUT/src_sass.err"
  gzip -f "$OUT/src_sass.csv"
fi
if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    timeout 100 compute-sanitizer --tool "$tool" --print-limit 5 python3 benchmarks/h200/h200_op.py sanitize-target \
      > "$OUT/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|done' "$OUT/sanitizer-$tool.log" | tr '\n' ' ')"
  done
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv,noheader
cat "$OUT/table.txt" 2>/dev/null || tail -40 "$OUT/bench.log"
