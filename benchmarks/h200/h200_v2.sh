#!/usr/bin/env bash
# One device call (issue 40): the sm_90a ABI v2 kernels (GQA, causal top-left / bottom-right, varlen,
# LSE) on the lent H200. Builds the library (or takes the carried build cache: REGRESS_CACHE_DIR), a
# smoke of every v2 kernel under a short timeout (a hang costs seconds), the GPU tests
# (tests/kernel/test_cuda_v2_gpu.py: the contract against fp64 with poisoned output and LSE buffers,
# guard rows around varlen outputs, bit-for-bit relations, CUDA graphs; and the quick suites), then
# benchmarks/h200/h200_v2.py: the suites' v2 cases (ULP, determinism, perf against cuDNN / FlashAttention-2
# / FlashAttention-2 varlen, the Llama-3-8B e2e layer), its table last. Outputs in $OUT.
#   run(command="bash benchmarks/h200/h200_v2.sh", carry=["wheels"])      (the merged tree: ~7 min with the nvcc build)
# Issue 40's calls ran a branch's changed files over main's tree, with the library prebuilt here:
#   run(command="python3 -c \"import tarfile; tarfile.open('.devwork/i40.txz').extractall('.devwork')\" &&
#       cp -a .devwork/i40cuda/. . && AB_LIB=... bash benchmarks/h200/h200_v2.sh", carry=[".devwork/i40.txz", "wheels"])
# Optional: .devwork/i40cache or i40cache.tgz (a carried build cache: REGRESS_CACHE_DIR, so nvcc does not run), AB_LIB
# (a second library, relative to the tree, timed A/B in the perf cases), NO_QUICK=1 (skip the quick
# suites test), TESTS_S / QUICK_S / SUITES_S (step timeouts), ITERS (perf rounds, default 50).
set -uo pipefail
source benchmarks/h200/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
# a carried build cache (a tarball where the 64 MiB a call carries is short) skips nvcc
[ -f .devwork/i40cache.tgz ] && tar -xzf .devwork/i40cache.tgz -C .devwork
[ -d .devwork/i40cache ] && export REGRESS_CACHE_DIR=$PWD/.devwork/i40cache
T0=$(date +%s)
timeout 420 python3 -m regress build --backend cuda >"$OUT/build.log" 2>&1
build_rc=$?
echo "build exit $build_rc after $(($(date +%s) - T0)) s"; tail -2 "$OUT/build.log"
T0=$(date +%s)
timeout 90 python3 - >"$OUT/smoke.log" 2>&1 <<'PY'
# every v2 kernel kind once (plan.h's rule 0), rtne, small shapes: finite outputs, no hang
import torch
from regress.native.build import build_kernel
from regress.kernel import load_library
lib = load_library(build_kernel("cuda").path)
g = torch.Generator().manual_seed(0)
def t(*s): return torch.randn(*s, generator=g).bfloat16().cuda()
cases = []
for mask in ("none", "causal_top_left", "causal_bottom_right"):
    for sq, sk in ((300, 500), (1, 700)):  # unpacked and packed GQA
        q, k, v = t(2, sq, 16, 128), t(2, sk, 4, 128), t(2, sk, 4, 128)
        kind = lib.plan(2, 16, sq, sk, layout="bshd", rounding="rtne", heads_kv=4, mask=mask)["kind"]
        cases.append((f"dense {mask} {sq}x{sk} {kind}", lambda q=q, k=k, v=v, m=mask: lib.forward(q, k, v, mask=m)))
    for lq in (200, 1):
        lens = [lq, 0, 3 * lq, 7]
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        n = int(cu[-1])
        q, k, v = t(n, 16, 128), t(n, 4, 128), t(n, 4, 128)
        cases.append((f"varlen {mask} {lens}", lambda q=q, k=k, v=v, cu=cu, m=mask, mx=max(lens): lib.forward(
            q, k, v, mask=m, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx, max_seqlen_k=mx)))
for name, fn in cases:
    o = fn(); torch.cuda.synchronize()
    print(f"{name:60s} finite={bool(torch.isfinite(o.float()).all())}", flush=True)
print("smoke ok")
PY
smoke_rc=$?
echo "smoke exit $smoke_rc after $(($(date +%s) - T0)) s"; tail -3 "$OUT/smoke.log"
tests_rc=skipped
if [ "$smoke_rc" = 0 ]; then
  T0=$(date +%s)
  timeout "${TESTS_S:-200}" python3 -m pytest -q --maxfail=30 -m "" -p no:cacheprovider tests/kernel/test_cuda_v2_gpu.py \
    >"$OUT/gpu-tests.log" 2>&1
  tests_rc=$?
  echo "v2 gpu tests exit $tests_rc after $(($(date +%s) - T0)) s: $(tail -1 "$OUT/gpu-tests.log")"
  grep -E "^(FAILED|ERROR)|Error|assert" "$OUT/gpu-tests.log" | head -20
fi
quick_rc=skipped
if [ "$smoke_rc" = 0 ] && [ "$tests_rc" != 124 ] && [ -z "${NO_QUICK:-}" ]; then
  T0=$(date +%s)  # the quick suites with this library, v2 cases gated like the dense ones
  timeout "${QUICK_S:-200}" python3 -m pytest -q -s -m "" -p no:cacheprovider tests/suites/test_suites_gpu.py \
    >"$OUT/quick-suites.log" 2>&1
  quick_rc=$?
  echo "quick suites exit $quick_rc after $(($(date +%s) - T0)) s: $(tail -1 "$OUT/quick-suites.log")"
fi
suites_rc=skipped
# AB_LIB (a build beside this one, e.g. -DRA_CUDA_PACK_GQA=2): every v2 perf case also times it in an
# A/B phase of the same rounds (h200_v2.py --ab-lib); the table's A/B column
ab=(); [ -n "${AB_LIB:-}" ] && ab=(--ab-lib "$PWD/$AB_LIB" --ab-label "${AB_LABEL:-$AB_LIB}")
if [ "$smoke_rc" = 0 ] && [ "$tests_rc" != 124 ]; then  # a hung kernel would hang these too
  T0=$(date +%s)
  timeout "${SUITES_S:-300}" python3 benchmarks/h200/h200_v2.py --out "$OUT" --iterations "${ITERS:-50}" "${ab[@]}" >"$OUT/v2.log" 2>&1
  suites_rc=$?
  echo "v2 suites exit $suites_rc after $(($(date +%s) - T0)) s"
  grep -E " (fail|error|skip|timeout) " "$OUT/v2.log" | head -20
fi
tar -czf "$OUT/logs.tgz" -C "$OUT" build.log smoke.log gpu-tests.log quick-suites.log v2.log 2>/dev/null
rm -f "$OUT/build.log" "$OUT/smoke.log"
echo "| build | smoke | v2 gpu tests | quick suites | v2 suites |"; echo "|---|---|---|---|---|"
echo "| $build_rc | $smoke_rc | $tests_rc | $quick_rc | $suites_rc |"
sed -n '/^| family/,$p' "$OUT/v2.log" 2>/dev/null
