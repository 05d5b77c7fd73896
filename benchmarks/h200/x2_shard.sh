#!/usr/bin/env bash
# One call on nvidia-h200-x2 (issue 8): the same quick suites sharded over both GPUs and on GPU 0
# alone, one after the other (wall-time ratio, per-GPU agreement of the same cases), then the full
# ULP suite sharded (AITER's pairs included). Needs the carried wheels folder.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source benchmarks/h200/device_env.sh
nvidia-smi -L
python3 -c "from regress.native.build import build_kernel; build_kernel('cuda')"
run() {  # name, timeout, args...
  local name=$1 t=$2; shift 2
  local t0=$(date +%s.%N)
  timeout "$t" python3 -m regress nightly --backend cuda --stack h200-cuda13.0 --allow-drift \
    --db "sqlite:///$OUT/x2.db" --out "$OUT" --trigger "x2-$name" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") s"
}
run sharded 90 --gpus all --quick --suites determinism,ulp,perf
run gpu0 110 --gpus 0 --quick --suites determinism,ulp,perf
run ulp-sharded 80 --gpus all --suites ulp
python3 benchmarks/h200/x2_report.py "sqlite:///$OUT/x2.db" | tee "$OUT/report.txt"
