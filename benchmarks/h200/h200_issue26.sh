#!/usr/bin/env bash
# One device call on the lent H200 for issue 26's close: (1) the product's full CUDA nightly (every
# suite, the full perf set, all modes; one SQLite database), its perf table with the geomean and
# each shape family's lower layout per mode; (2) the builds of H200_LIBS beside the default ("new";
# call 1: the in-kernel merge, call 2: its ablation and the L2 prefetch) on the decode, short-query
# and short shapes: h200_split.py's checks (fp64 ULP, NaN/Inf, coverage, every timed build's bits
# equal to the default's, determinism, CUDA graph) and its interleaved timing against cuDNN, eager
# and under graphs; (3) ncu on the weakest shapes, time allowing. The bench's libraries build in
# the background first (while the nightly would build its own).
# STEPS="bench nightly profile" reorders; H200_LIBS, H200_SHAPES, H200_OVERHEAD, H200_NCU_SHAPES as
# in h200_split.py.
# Call 21 (docs/perf-notes.md v6) ran: STEPS="bench nightly profile" H200_SHAPES=targets,edges,regular
#   H200_LIBS="new=;mk1=-DRA_CUDA_MERGE_KERNEL=1;pf1=-DRA_CUDA_L2_PREFETCH=1;pf2=-DRA_CUDA_L2_PREFETCH=2"
#   H200_OVERHEAD="1,32,1,8192;8,32,1,4096;4,32,64,8192" H200_NCU_SHAPES="256,32,128,128;1,32,1,8192"
#   NCU_KERNELS=12 BENCH_MAX=150 BENCH_RESERVE=340 NIGHTLY_RESERVE=40.
# Call 23 (docs/perf-notes.md v7): STEPS="bench profile" H200_SHAPES=targets,regular
#   H200_LIBS="new=;h1=-DRA_CUDA_TMA_HINT=1;h3=-DRA_CUDA_TMA_HINT=3;h5=-DRA_CUDA_TMA_HINT=5"
#   H200_OVERHEAD="8,32,1,4096;4,32,64,8192" H200_NCU_SHAPES="256,32,128,128;8,32,1,4096" NCU_KERNELS=12
#   BENCH_MAX=260 BENCH_RESERVE=60 CALL_S=420; call 24 the same with H200_LIBS="new=;h2=...=2;h6=...=6",
#   H200_NCU_SHAPES="256,32,128,128" NCU_KERNELS=8; call 25: STEPS=nightly H200_LIBS="new="
#   NIGHTLY_RESERVE=30 CALL_S=560; call 26: STEPS=profile H200_LIBS="new=" with NCU_SECTIONS (below);
#   call 27 as call 24 with H200_LIBS="new=;h9=-DRA_CUDA_TMA_HINT=9;h17=-DRA_CUDA_TMA_HINT=17".
# Calls 28-31 (docs/perf-notes.md v8): STEPS="bench profile" H200_NCU_SHAPES="256,32,128,128"
#   H200_SHAPE_LIST="256,32,128,128;8,32,1,4096;256,32,128,128;..." (h200_split.py: exactly these)
#   BENCH_MAX=200 BENCH_RESERVE=60 CALL_S=300, H200_LIBS the tile orders (call 28:
#   "new=;o1=-DRA_CUDA_TILE_ORDER=1;o2=...=2;o1g0=...=1 -DRA_CUDA_GRID_BALANCE=0") and the dynamic
#   scheduler (calls 29-31: "new=;t1=-DRA_CUDA_DYN_SCHED=1;t2=-DRA_CUDA_DYN_SCHED=2", ...).
# Call 32 (docs/perf-notes.md v8 addendum): STEPS="bench quick" H200_LIBS="new=;t1=-DRA_CUDA_DYN_SCHED=1"
#   H200_SHAPE_LIST (the 77-key shapes and (256,32,128,128) repeated between the guards)
#   H200_OVERHEAD="8,32,1,4096" BENCH_MAX=120 BENCH_RESERVE=60 CALL_S=215; `quick` is the landed
#   default's quick CUDA nightly (h200_quick_and_swap.sh's first part). The short table printed last:
#   h200_split.py summary (each build's ratio to cuDNN per mode, the range over a shape's repeats).
# Calls 38-39 (docs/perf-notes.md v13): STEPS=bench COMPILE_TEST=1 with the short-key kernel's A/B
#   (H200_LIBS="new=;s0=-DRA_CUDA_SHORT_BLOCK_N=0;q2=-DRA_CUDA_SHORT_Q_STAGES=2": s0 was then taken
#   for a forced split, untimed; name it ns), then STEPS=nightly; each call.log has the full line.
# Calls 40-42 (docs/perf-notes.md v14): STEPS=bench H200_LIBS="new=;ns=-DRA_CUDA_SHORT_BLOCK_N=0;pp=-DRA_CUDA_PINGPONG=-1",
#   then the stream schedule's A/B (its code: benchmarks/campaigns/h200-issue26.tar.xz:call22/stream.diff, not landed) and
#   STEPS=profile with NCU_SECTIONS; each call.log has the full line.
# Calls 49-54 (docs/perf-notes.md v15): the ablations and ncu stall sampling (BENCH_SKIP=check,overhead
#   H200_CHECKS=0 H200_TIME_MODES=rtne NCU_SOURCE=1 H200_NCU_LIBS=1), the split P.V's A/B with the full
#   check, then STEPS="nightly bench" / "bench nightly" with BENCH_SKIP=check (the `bits` part: the timed
#   builds' bit equality alone); each call.log has the full line.
# BENCH_SKIP="check,overhead" leaves parts of h200_split.py out; H200_CHECKS=0 also skips the check builds.
# NCU_SOURCE=1 writes every collected metric (ncu-raw.csv) and the stall samples per SASS line
#   (ncu-source.csv.gz; collect them with NCU_SECTIONS="... WarpStateStats SourceCounters").
# STEPS may name `gputests` (pytest -m gpu on the fallback and quick-suite tests: the mma.sync
#   fallback's batch chunking, written after the last device call of 2026-12-02, waits for it).
# STEPS may name `perf` (the perf suite alone, full set; repeated, each run its own bundle: the run-to-run
#   spread of the family ratios, benchmarks/h200/family_spread.py).
# STEPS may name `floor` (benchmarks/h200/h200_byte_floor.py: the byte-bound families' time against a kernel
#   that only moves their bytes, cuDNN and ours in the same rounds; docs/perf-notes.md v16).
# STEPS may name `trace` (h200_byte_floor.py --trace: per-CTA phases of a -DRA_CUDA_TRACE=1 build).
# STEPS may name `ceiling` (benchmarks/h200/h200_ceiling.py measure, about 20 s; docs/perf-notes.md v9).
# NCU_SECTIONS="SpeedOfLight ComputeWorkloadAnalysis ..." replaces the profile's ncu sections.
# Needs the carried wheels (benchmarks/h200/device_env.sh):
#   run(command="cd .devstage/h200 && ln -sfn ../../wheels wheels && bash benchmarks/h200/h200_issue26.sh",
#       carry=[".devstage/h200", "wheels"])
set -uo pipefail
T0=$(date +%s)
left() { echo $((${CALL_S:-585} - ($(date +%s) - T0))); }
source benchmarks/h200/device_env.sh
rm -rf /tmp/bench  # a warm machine keeps the last call's: its table must not be printed as this one's
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export H200_LIBS=${H200_LIBS:-"new=;mk1=-DRA_CUDA_MERGE_KERNEL=1"}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
if [ "${PREBUILD:-1}" = 1 ]; then  # PREBUILD=0: no bench this call (the nightly builds its own library)
  python3 benchmarks/h200/h200_split.py build >/tmp/prebuild.log 2>&1 &
  PREBUILD=$!
else
  true &
  PREBUILD=$!
fi
if [ "${COMPILE_TEST:-0}" = 1 ]; then  # the slow compile-only tests, SASS included (cuobjdump is here)
  python3 -m pytest tests/kernel/test_cuda_compile.py -m slow -q -x -p no:cacheprovider >"$OUT/compile-test.log" 2>&1 &
  CTEST=$!
fi

nightly() {  # (1) the full nightly
  local S=$(date +%s) L=$(($(left) - ${NIGHTLY_RESERVE:-130}))
  [ "$L" -gt 450 ] && L=450
  timeout "$L" python3 -m regress nightly --backend cuda --stack h200-cuda13.0 --allow-drift \
    --deadline $((L - 25)) --db "sqlite:////tmp/full.db" --out /tmp/full --trigger device-full \
    --runner h200-lent >"$OUT/nightly.log" 2>&1
  echo "full nightly exit $? after $(($(date +%s) - S)) s (limit $L s)"
  for b in /tmp/full/bundles/*.json; do
    cp "$b" "$OUT/"
    python3 benchmarks/h200/perf_table.py "$b" >"$OUT/perf_table.txt" 2>&1
  done
  grep -v -E "^\s*$" "$OUT/nightly.log" | tail -12
}

bench() {  # (2) the timed builds beside the default
  local B=$(($(left) - ${BENCH_RESERVE:-130}))
  [ "$B" -gt "${BENCH_MAX:-200}" ] && B=${BENCH_MAX:-200}
  if [ "$B" -gt 60 ]; then
    mkdir -p /tmp/bench
    H200_SHAPES=${H200_SHAPES:-targets,edges} H200_OVERHEAD=${H200_OVERHEAD:-"1,32,1,8192;8,32,1,4096"} \
      timeout "$B" python3 benchmarks/h200/h200_split.py all --out /tmp/bench ${BENCH_SKIP:+--skip "$BENCH_SKIP"} \
        >"$OUT/bench.log" 2>&1
    echo "bench exit $? (limit $B s)"
    cp /tmp/bench/results.json "$OUT/bench-results.json" 2>/dev/null
  else
    echo "bench skipped: $(left) s left"
  fi
}

profile() {  # (3) ncu on the weakest shapes: the first three timed builds and cuDNN
  local NCU N=$(($(left) - 15))
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$NCU" ] && [ "$N" -gt 40 ]; then
    H200_NCU_SHAPES=${H200_NCU_SHAPES:-"1,32,1,8192;256,32,128,128;2,16,8192,8192"} timeout "$N" "$NCU" \
      --clock-control none -k regex:"attn_|sdpa|fmha|cudnn" -c "${NCU_KERNELS:-16}" \
      $(for x in ${NCU_SECTIONS:-SpeedOfLight MemoryWorkloadAnalysis LaunchStats WarpStateStats Occupancy}; do
        echo --section "$x"; done) -f -o /tmp/prof python3 benchmarks/h200/h200_split.py ncu-target >/tmp/ncu.log 2>&1
    echo "ncu exit $? (limit $N s)"
    "$NCU" -i /tmp/prof.ncu-rep --page details >"$OUT/ncu.txt" 2>&1
    if [ "${NCU_SOURCE:-0}" = 1 ]; then  # every metric collected, and the stall samples per SASS line
      "$NCU" -i /tmp/prof.ncu-rep --page raw --csv >"$OUT/ncu-raw.csv" 2>&1
      "$NCU" -i /tmp/prof.ncu-rep --page source --csv --print-source sass >"$OUT/ncu-source.csv" 2>&1
      gzip -f "$OUT/ncu-source.csv"
    fi
    grep -E "^  [a-z_A-Z].*\(|^ +(Duration|DRAM Throughput|L2 Hit Rate)" "$OUT/ncu.txt" | sed -E 's/ +/ /g' | cut -c1-110
  else
    echo "ncu skipped: $(left) s left"
  fi
}

quick() {  # the landed default's quick CUDA nightly (every suite, directed rounding cases included)
  local S=$(date +%s) L=$(($(left) - 8))
  if [ "$L" -gt 40 ]; then
    timeout "$L" python3 -m regress nightly --backend cuda --stack h200-cuda13.0 --allow-drift --quick \
      --runner h200-lent --db "sqlite:////tmp/quick.db" --out /tmp/quick --trigger device-quick \
      >"$OUT/quick.log" 2>&1
    echo "quick nightly exit $? after $(($(date +%s) - S)) s (limit $L s)"
    cp /tmp/quick/bundles/*.json "$OUT/" 2>/dev/null
    grep -v -E "^\s*$" "$OUT/quick.log" | tail -4
  else
    echo "quick nightly skipped: $(left) s left"
  fi
}

gputests() {  # the GPU-marked tests (tests/kernel/test_cuda_fallback_gpu.py, the quick suites' test)
  local S=$(date +%s) L=$(($(left) - 10))
  [ "$L" -gt 300 ] && L=300
  timeout "$L" python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/kernel/test_cuda_fallback_gpu.py tests/kernel/test_cuda_threads_gpu.py \
    tests/suites/test_suites_gpu.py >"$OUT/gputests.log" 2>&1
  echo "gpu tests exit $? after $(($(date +%s) - S)) s (limit $L s): $(tail -1 "$OUT/gputests.log")"
}

ceiling() {  # the device's two sustained ceilings (GEMM, copy) in the nightly's round protocol
  local S=$(date +%s) L=$(($(left) - 10)) TAG=""
  [ "$L" -gt 150 ] && L=150
  [ -e "$OUT/h200-ceiling.json" ] && TAG="-after"  # STEPS="ceiling nightly ceiling" brackets a nightly
  if [ "$L" -gt 30 ]; then
    timeout "$L" python3 benchmarks/h200/h200_ceiling.py measure --out "$OUT/h200-ceiling$TAG.json" >"$OUT/ceiling$TAG.log" 2>&1
    echo "ceiling$TAG exit $? after $(($(date +%s) - S)) s (limit $L s)"
    tail -6 "$OUT/ceiling$TAG.log"
  else
    echo "ceiling skipped: $(left) s left"
  fi
}

perf() {  # the perf suite alone, the full set (STEPS="perf perf": repeats, each its own bundle and table)
  local S=$(date +%s) L=$(($(left) - 10)) N
  N=$(ls -d /tmp/perf-* 2>/dev/null | wc -l)
  if [ "$L" -gt 200 ]; then
    [ "$L" -gt 300 ] && L=300
    timeout "$L" python3 -m regress nightly --backend cuda --stack h200-cuda13.0 --allow-drift --suites perf \
      --deadline $((L - 15)) --db "sqlite:////tmp/perf.db" --out "/tmp/perf-$N" --trigger device-perf \
      --runner h200-lent >"$OUT/perf-$N.log" 2>&1
    echo "perf run $N exit $? after $(($(date +%s) - S)) s (limit $L s)"
    for b in /tmp/perf-"$N"/bundles/*.json; do
      cp "$b" "$OUT/"
      python3 benchmarks/h200/perf_table.py "$b" >"$OUT/perf_table-$N.txt" 2>&1
    done
    grep -E "below" "$OUT/perf_table-$N.txt"
  else
    echo "perf run skipped: $(left) s left"
  fi
}

floor() {  # the byte-bound families beside a kernel that only moves their bytes (h200_byte_floor.py)
  local S=$(date +%s) L=$(($(left) - 10))
  if [ "$L" -gt 60 ]; then
    mkdir -p "$OUT/floor"
    timeout "$L" python3 benchmarks/h200/h200_byte_floor.py --out "$OUT/floor" >"$OUT/floor.log" 2>&1
    echo "floor exit $? after $(($(date +%s) - S)) s (limit $L s)"
    rm -f "$OUT/floor/byte_floor.so"
  else
    echo "floor skipped: $(left) s left"
  fi
}

trace() {  # per-CTA phases of one launch, a -DRA_CUDA_TRACE=1 build (h200_byte_floor.py --trace)
  local S=$(date +%s) L=$(($(left) - 10))
  if [ "$L" -gt 60 ]; then
    mkdir -p "$OUT/trace"
    timeout "$L" python3 benchmarks/h200/h200_byte_floor.py --trace --out "$OUT/trace" >"$OUT/trace.log" 2>&1
    echo "trace exit $? after $(($(date +%s) - S)) s (limit $L s)"
  else
    echo "trace skipped: $(left) s left"
  fi
}

wait "$PREBUILD"  # the bench's builds are in the cache before anything is timed
echo "prebuild exit $? after $(($(date +%s) - T0)) s ($(tail -1 /tmp/prebuild.log))"
if [ -n "${CTEST:-}" ]; then
  wait "$CTEST"
  echo "compile test exit $? after $(($(date +%s) - T0)) s: $(tail -1 "$OUT/compile-test.log")"
fi
for step in ${STEPS:-nightly bench profile}; do "$step"; done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv,noheader
echo "== call wall $(($(date +%s) - T0)) s =="
grep -E "built|checks|FAIL|failed|graph:|\[" "$OUT/bench.log" 2>/dev/null | cut -c1-300 | head -20
cat /tmp/bench/table.txt 2>/dev/null
grep -E "^floor checks" "$OUT/floor.log" 2>/dev/null
cat "$OUT/floor/floor.txt" 2>/dev/null
cat "$OUT/trace/trace.txt" 2>/dev/null || tail -5 "$OUT/trace.log" 2>/dev/null
grep -A4 "geomean vs" "$OUT/perf_table.txt" 2>/dev/null
grep -E "below|^suites" "$OUT/perf_table.txt" 2>/dev/null
if [ -s /tmp/bench/results.json ]; then
  python3 benchmarks/h200/h200_split.py summary --out /tmp/bench | tee "$OUT/summary.txt"
fi
