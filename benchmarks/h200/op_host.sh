#!/usr/bin/env bash
# One device call for issue 40, item 3 (benchmarks/h200/op_host.py says what is measured): the eager host
# time per call of torch.ops.regress.attention (C++ kernels), the same op with the Python kernels,
# regress.kernel.attention and the bare ctypes call, each against SDPA in the same rounds, on CUDA
# and on the host's CPU; first the C++ kernels are held to the Python ones on the GPU (bits, CUDA
# graph, side stream, torch.compile). About 2-3 minutes, the table last. Needs the carried wheels
# folder (benchmarks/h200/device_env.sh):
#   run(command="bash benchmarks/h200/op_host.sh", carry=["wheels"])
set -uo pipefail
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
source benchmarks/h200/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
# The two builds a first call needs, side by side: nvcc for the kernel, g++ for the operator.
python3 -c "from regress.native.build import build_kernel as b; a = b('cuda'); print('cuda kernel', round(a.build_seconds), 's, cached', a.cached)" \
  > "$OUT/build_cuda.log" 2>&1 &
python3 -c "from regress.native.build import build_op as b; a = b(); print('torch op', round(a.build_seconds), 's, cached', a.cached, a.flags)" \
  > "$OUT/build_op.log" 2>&1
wait
tail -3 "$OUT/build_cuda.log" "$OUT/build_op.log" | cut -c1-400
# REGRESS_OP=native: a failed C++ build stops the call instead of timing the Python fallback.
REGRESS_OP=native timeout "${BENCH_TIMEOUT:-200}" python3 benchmarks/h200/op_host.py --device cuda --device cpu \
  --out "$OUT" > "$OUT/op_host.log" 2>&1
echo "op_host exit $?"
grep -E "^checks on|^(cuda|cpu) [0-9]" "$OUT/op_host.log" | cut -c1-400
cat "$OUT/op_host_table.txt" 2>/dev/null || tail -40 "$OUT/op_host.log"
