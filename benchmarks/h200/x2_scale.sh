#!/usr/bin/env bash
# Issue 17, one call on nvidia-h200-x2: the full nightly sharded over both GPUs, then on GPU 0 alone,
# same machine, same build, same database; wall times, where the time went (per phase, per suite,
# per worker, worker start-up), per-GPU agreement, and a short table last.
#   run(command="cd .dev17 && bash benchmarks/h200/x2_scale.sh", carry=[".dev17"], kind="nvidia-h200-x2")
# Needs the wheels folder beside it (benchmarks/h200/device_env.sh).
# Dry run on a CPU machine: BACKEND=cpu STACK= ALL=0,1 EXTRA=--quick bash benchmarks/h200/x2_scale.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BACKEND=${BACKEND:-cuda}
STACK=${STACK-h200-cuda13.0}
ALL=${ALL:-all}
ORDER=${ORDER:-"$ALL 0"}
BUDGET=${BUDGET:-540}  # seconds for the whole script: the device call's limit, less the transfers
START=$(date +%s)
# Fails in seconds, not after the budget, when a dependency did not travel.
source benchmarks/h200/device_env.sh
command -v nvidia-smi >/dev/null && nvidia-smi -L
echo "cores: $(nproc)"
STACK_ARGS=(); [ -n "$STACK" ] && STACK_ARGS=(--stack "$STACK" --allow-drift)
BUILD_ARGS=(); [ -n "$STACK" ] && BUILD_ARGS=(--stack "$STACK")
t0=$(date +%s.%N)
timeout 240 python3 -m regress build --backend "$BACKEND" "${BUILD_ARGS[@]}" > "$OUT/build.log" 2>&1
echo "build rc=$? $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s"
# The schema exists before the clock starts, as it does on a runner: neither run pays for migrations.
python3 -m regress db upgrade --db "sqlite:///$OUT/x2.db" > /dev/null
: > "$OUT/walls.txt"
for g in $ORDER; do
  left=$((BUDGET - ($(date +%s) - START) - 15))
  [ "$left" -lt 30 ] && { echo "gpus $g: skipped, $left s left"; continue; }
  t0=$(date +%s.%N)
  timeout "$left" python3 -m regress nightly --backend "$BACKEND" "${STACK_ARGS[@]}" --gpus "$g" ${EXTRA:-} \
    --db "sqlite:///$OUT/x2.db" --out "$OUT" --trigger "x2-gpus-$g" > "$OUT/gpus-$g.log" 2>&1
  rc=$?
  wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))")
  echo "x2-gpus-$g $wall $rc" >> "$OUT/walls.txt"
  echo "--gpus $g: rc=$rc wall=$wall s (timeout $left s)"
  tail -n 12 "$OUT/gpus-$g.log"
done
python3 benchmarks/h200/x2_scale_report.py "sqlite:///$OUT/x2.db" "$OUT/walls.txt" | tee "$OUT/report.txt"
cp "$OUT"/bundles/*.json "$OUT"/ 2>/dev/null
rm -rf "$OUT/bundles" "$OUT/x2.db"
