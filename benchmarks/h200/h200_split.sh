#!/usr/bin/env bash
# One device call on the lent H200 for issue 26 (benchmarks/h200/h200_split.py says what is measured):
# build the default, the no-split ablation and forced-split libraries, check them (fp64 reference,
# NaN/Inf, poisoned and guarded output, determinism, drills through the merge, CUDA graph), time
# them against SDPA flash and cuDNN, per-call time eager and under CUDA graphs, then ncu on decode.
# Needs no wheels (nothing here imports the store).   run(command="bash benchmarks/h200/h200_split.sh")
set -uo pipefail
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout "${BENCH_TIMEOUT:-420}" python3 benchmarks/h200/h200_split.py all --out "$OUT" --skip "${SKIP:-}" \
  > "$OUT/bench.log" 2>&1
echo "bench exit $? ($(grep -c . "$OUT/bench.log") log lines)"
grep -E "built|checks|FAIL|failed|graph|\[" "$OUT/bench.log" | head -30
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ "${NCU_RUN:-1}" = 1 ] && [ -n "$NCU" ]; then
  timeout "${NCU_TIMEOUT:-100}" "$NCU" --clock-control none -k regex:"attn_|sdpa|fmha|cudnn" -c 12 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section WarpStateStats \
    -f -o "$OUT/prof" python3 benchmarks/h200/h200_split.py ncu-target > "$OUT/ncu.log" 2>&1
  echo "ncu exit $?"
  "$NCU" -i "$OUT/prof.ncu-rep" --page details > "$OUT/ncu.txt" 2>&1 && rm -f "$OUT/prof.ncu-rep"
  grep -E "^  [a-z_A-Z].*\(|^ +(Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|Grid Size|Compute \(SM\) Throughput)" \
    "$OUT/ncu.txt" | sed -E 's/ +/ /g' | cut -c1-120
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv,noheader
cat "$OUT/table.txt" 2>/dev/null || tail -40 "$OUT/bench.log"
