#!/usr/bin/env bash
# Since 2026-12-05's calls measured (i) (the rows build is the default), call1's (i) is a decode sweep
# instead (DECODE=sweep, the default; DECODE=rows runs the old (i)): the 16-sequence decode, the bar
# still missed at 0.998x cuDNN, against each SPLIT_VARIANTS build (forced key splits) and cuDNN, rtne,
# one run per build (SWEEP_SHAPE, SWEEP_MODES), their outputs in $OUT/sweep.tgz.
# Issue 40's close on the H200 in two device calls (docs/perf-notes.md, "Issue 40 close"): call1 (i) the
# GQA decode against an 8k cache, 16 / 1 / 4 sequences x 32/8 heads, the default library (since
# 2026-12-05 RA_CUDA_GQA_ROWS=1, kernel/common/gqa_rows.h: the dense kernels and their split over keys)
# against a -DRA_CUDA_GQA_ROWS=0 build (the v2 kernels) and against cuDNN, two arms a run, each arm on
# its own inputs, the two builds' bits against each other and the contract
# (benchmarks/h200/h200_issue40_close.py decode); (ii) `regress gate --ab` of the
# dense kernels: the perf suite with this tree's library against commit 4cc9352's (--compare-build; its
# library refuses v2 calls, so the v2 cases skip and the gate judges the dense ones). call2 (iii)
# `regress nightly --backend cuda --suites ulp,determinism` alone, its bundle kept. Each call writes
# everything under $OUT and prints the close's short table last (h200_issue40_close.py table).
#
#   bash benchmarks/h200/h200_issue40_close.sh prep      here, no GPU (nvcc, git; ~70 s on 2 cores):
#       the three libraries prebuilt with this tree's nvcc into .devwork/i40close.tgz (a build cache with
#       the default and the GQA_ROWS=0 builds, 4cc9352's kernel/ sources and its library), so no call
#       spends device time in nvcc (a call rebuilds what is missing or was built by another nvcc)
#   run(command="bash benchmarks/h200/h200_issue40_close.sh call1", carry=["wheels", ".devwork/i40close.tgz"], timeout_s=600)
#   run(command="bash benchmarks/h200/h200_issue40_close.sh call2", carry=["wheels", ".devwork/i40close.tgz"], timeout_s=600)
#   run(command="bash benchmarks/h200/h200_issue40_close.sh control", carry=[...as above])  (ii)'s A/A control:
#       old and new libraries each against a copy of itself and against each other, the flagged shapes
#   run(command="bash benchmarks/h200/h200_issue40_close.sh aa", carry=[...as above])  the gate's A/A: this
#       tree's library against a byte-identical copy through the perf suite's A/B (both listings) and the gate
#   bash benchmarks/h200/h200_issue40_close.sh prep-stair   (here: only the four libraries `stair` loads;
#       STAIR_BASE=<commit> also builds that commit's default library, which `stair` then times in its
#       A/B phase instead of the gap build: a change to the default kernels against its base)
#   run(command="bash benchmarks/h200/h200_issue40_close.sh stair", carry=[...as above])  RA_CUDA_STAIR_EXACT=1
#       (the default since 2026-12-06): the GPU test tier on its build, then the v2 perf cases with the
#       gap build (=0), or STAIR_BASE's library, in the A/B phase; STAIR_VALUES lists the values to measure
#       in turn (prep builds them)
#   DEVICE=cpu bash benchmarks/h200/h200_issue40_close.sh call1    the dry run on this machine's CPU backend:
#       the same steps (decode on small shapes, a quick perf A/B against 4cc9352's CPU library, the
#       gate, the table), so the harness is checked without a GPU; call2 likewise with --quick
# Knobs: OUT (default /tmp/out), CALL_S (the call's budget, 570), DECODE_ITERS (100), DECODE_S (150),
# NIGHTLY_DEADLINE (call2's --deadline, 520).
set -uo pipefail
step=${1:?usage: benchmarks/h200/h200_issue40_close.sh prep|prep-stair|call1|call2|control|aa|stair}
OLD_COMMIT=4cc9352
WORK=.devwork/i40close
DEVICE=${DEVICE:-cuda}
CALL_S=${CALL_S:-570}
T_START=$(date +%s)
# call1's decode sweep at 16 x 32/8 against 8k (the bar still missed: 0.998x cuDNN): forced key splits,
# with and without the grid balance (which keeps any split on 128 CTAs; off, the persistent grid is 132)
SPLIT_VARIANTS=("-DRA_CUDA_SPLIT=2" "-DRA_CUDA_SPLIT=8 -DRA_CUDA_GRID_BALANCE=0"
  "-DRA_CUDA_SPLIT=16 -DRA_CUDA_GRID_BALANCE=0" "-DRA_CUDA_SPLIT=32 -DRA_CUDA_GRID_BALANCE=0")
cd "$(dirname "$0")/../.."
# the GPU test tier (the files marked gpu), which the stair step runs on the device
GPU_TESTS=(tests/kernel/test_cuda_v2_gpu.py tests/kernel/test_cuda_threads_gpu.py tests/kernel/test_cuda_fallback_gpu.py
  tests/suites/test_suites_gpu.py)

lib_of() {  # $1 a backend, then nvcc flags: that build's library path (built, or from the build cache)
  PYTHONPATH=$PWD python3 -c "import sys; from regress.native.build import build_kernel as b; print(b(sys.argv[1], extra_flags=tuple(sys.argv[2:])).path)" "$@"
}

build_tree() {  # $1 backend, $2 a folder holding a commit's kernel/, $3 a prefix: that commit's library,
  # by this tree's build command (sass_diff.sh's way), as $2/$3-<output> with its log $2/$3-<backend>.log
  local backend=$1 src=$2 prefix=$3
  PYTHONPATH=$PWD python3 - "$backend" "$src" "$prefix" <<'PY'
import shlex, subprocess, sys
from pathlib import Path
from regress.native.build import COMMANDS, OUT
backend, src, prefix = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
r = COMMANDS[backend]
out = (src / f"{prefix}-{r.output}").resolve()
argv = [str(out) if a == OUT else a for a in r.argv]
p = subprocess.run(argv, cwd=src, capture_output=True, text=True)
(src / f"{prefix}-{backend}.log").write_text(shlex.join(argv) + "\n" + p.stdout + p.stderr)
sys.exit(p.returncode)
PY
}
build_old() { build_tree "$1" "$WORK/old" old; }  # 4cc9352's library from its kernel/ sources

unpack() {  # the carried work folder; its build cache serves build_kernel
  [ -f .devwork/i40close.tgz ] && [ ! -d "$WORK" ] && tar -xzf .devwork/i40close.tgz -C .devwork
  mkdir -p "$WORK/cache" && export REGRESS_CACHE_DIR=$PWD/$WORK/cache
}

if [ "$step" = prep-stair ]; then  # only what `stair` with STAIR_ONLY=1 loads: the default, =1, =0, mma.sync
  command -v nvcc >/dev/null || { echo "prep-stair needs nvcc"; exit 2; }
  rm -rf "$WORK" && mkdir -p "$WORK/cache"
  export REGRESS_CACHE_DIR=$PWD/$WORK/cache PYTHONPATH=$PWD
  for v in "" -DRA_CUDA_STAIR_EXACT=1 -DRA_CUDA_STAIR_EXACT=0 -DRA_CUDA_FORCE_MMA_SYNC=1; do  # the last: the fallback test's
    lib=$(lib_of cuda $v) || exit 1
    echo "${v:-default} $lib"
  done
  if [ -n "${STAIR_BASE:-}" ]; then  # the stair step's A/B arm: that commit's default library
    mkdir -p "$WORK/base" && git archive "$STAIR_BASE" kernel | tar -x -C "$WORK/base" || exit 1
    git rev-parse --short "$STAIR_BASE" >"$WORK/base/COMMIT"
    build_tree cuda "$WORK/base" base || { tail -5 "$WORK/base/base-cuda.log"; exit 1; }
    echo "base $(cat "$WORK/base/COMMIT") $WORK/base/base-libregress_attn_cuda.so"
  fi
  tar -czf .devwork/i40close.tgz -C .devwork i40close && ls -la .devwork/i40close.tgz
  exit 0
fi
if [ "$step" = prep ]; then
  command -v nvcc >/dev/null || { echo "prep needs nvcc (the device calls then build on the device)"; exit 2; }
  git rev-parse --verify -q "$OLD_COMMIT^{commit}" >/dev/null || { echo "prep needs commit $OLD_COMMIT"; exit 2; }
  rm -rf "$WORK" && mkdir -p "$WORK/cache" "$WORK/old"
  export REGRESS_CACHE_DIR=$PWD/$WORK/cache PYTHONPATH=$PWD
  git archive "$OLD_COMMIT" kernel | tar -x -C "$WORK/old"
  echo "default $(lib_of cuda)" &
  echo "v2 $(lib_of cuda -DRA_CUDA_GQA_ROWS=0)" &
  echo "gap $(lib_of cuda -DRA_CUDA_STAIR_EXACT=0)" &
  build_old cuda && echo "old $WORK/old/old-libregress_attn_cuda.so"
  old_rc=$?
  wait
  stair_flags=(); for sv in ${STAIR_VALUES:-1}; do stair_flags+=("-DRA_CUDA_STAIR_EXACT=$sv"); done
  for v in "${stair_flags[@]}" "${SPLIT_VARIANTS[@]}"; do  # the stair step's and call1's sweep's, one at a time
    echo "$v $(lib_of cuda $v)"
  done
  [ "$old_rc" = 0 ] || { tail -5 "$WORK/old/old-cuda.log"; exit 1; }
  tar -czf .devwork/i40close.tgz -C .devwork i40close && ls -la .devwork/i40close.tgz
  exit 0
fi

source benchmarks/h200/device_env.sh
unpack
if [ "$DEVICE" = cpu ]; then  # the dry run: the CPU backend, small shapes, the quick suites
  BACKEND=cpu STACK=() QUICK=(--quick) DECODE_ARGS=(--dry-run --shapes 2:8:2:300,1:8:1:77 --iterations 6)
  if [ ! -f "$WORK/old/old-libregress_attn_cpu.so" ]; then
    [ -d "$WORK/old/kernel" ] || { mkdir -p "$WORK/old" && git archive "$OLD_COMMIT" kernel | tar -x -C "$WORK/old"; }
    build_old cpu || { tail -5 "$WORK/old/old-cpu.log"; exit 1; }
  fi
else
  BACKEND=cuda STACK=(--stack h200-cuda13.0 --allow-drift) QUICK=() DECODE_ARGS=(--iterations "${DECODE_ITERS:-100}")
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
  if [ ! -f "$WORK/old/old-libregress_attn_cuda.so" ] && [ -d "$WORK/old/kernel" ]; then
    build_old cuda || tail -5 "$WORK/old/old-cuda.log"  # nvcc on the device: ~1-2 min
  fi
fi
OLD_LIB=$PWD/$WORK/old/old-$(PYTHONPATH=$PWD python3 -c "from regress.native.build import COMMANDS; print(COMMANDS['$BACKEND'].output)")
left() { echo $((CALL_S - ($(date +%s) - T_START))); }

keep_bundle() {  # $1 the nightly's --out, $2 a name: its bundle as $OUT/NAME-RUNID.json.gz; prints the run id
  local b
  b=$(ls "$1"/bundles/*.json 2>/dev/null | head -1)
  [ -n "$b" ] || return 1
  python3 - "$b" "$OUT/$2" <<'PY'
import gzip, json, shutil, sys
blob = json.load(open(sys.argv[1]))
rid = blob["run"]["id"]
with open(sys.argv[1], "rb") as f, gzip.open(f"{sys.argv[2]}-{rid}.json.gz", "wb") as g:
    shutil.copyfileobj(f, g)
print(rid)
PY
}

ab_gate() {  # $1 the baseline library, $2 a label: the perf suite's A/B of this tree's library against it
  # (both listings since issue 40's close), its bundle kept, then `regress gate --ab` on that run
  local lib=$1 label=$2 T0 deadline rid
  T0=$(date +%s)
  deadline=$(($(left) - 60))  # the gate, the bundle and the table after it
  timeout $((deadline + 30)) python3 -m regress nightly --backend "$BACKEND" "${STACK[@]}" --suites perf "${QUICK[@]}" \
    --compare-build "$lib" --deadline "$deadline" --db "sqlite:///$OUT/ab.db" --out "$OUT/ab" \
    --trigger device-run --runner h200-lent >"$OUT/ab.log" 2>&1
  echo "$label perf A/B nightly exit $? after $(($(date +%s) - T0)) s (deadline $deadline s)"
  tail -4 "$OUT/ab.log"
  if rid=$(keep_bundle "$OUT/ab" ab); then
    python3 -m regress gate --ab --run "$rid" --db "sqlite:///$OUT/ab.db" --report-dir "$OUT/gate" --json \
      >"$OUT/gate.json" 2>"$OUT/gate.err"
    echo "$label gate --ab --run $rid exit $?"
    python3 -m regress gate --ab --run "$rid" --db "sqlite:///$OUT/ab.db" --report-dir "$OUT/gate" 2>&1 | tail -15
  else
    echo "$label no bundle written: no gate"
  fi
}

sweep() {  # (i) since call 3 of 2026-12-05 measured the rows build: the 16-sequence decode against each
  # forced split build (decode's "other" arm) and cuDNN, rtne, every variant a run of its own
  local T0 n=0 dshape v
  T0=$(date +%s)
  dshape=(--shapes "${SWEEP_SHAPE:-16:32:8:8192}" --modes "${SWEEP_MODES:-rtne}")
  [ "$DEVICE" = cpu ] && dshape=(--shapes 2:8:2:300 --modes rtne)
  for v in "${SPLIT_VARIANTS[@]}"; do
    n=$((n + 1))
    timeout "${DECODE_S:-60}" python3 benchmarks/h200/h200_issue40_close.py decode --out "$OUT/sweep$n" \
      "${DECODE_ARGS[@]}" "${dshape[@]}" --other-flags="$v" >"$OUT/sweep$n.log" 2>&1
    echo "(i) sweep $n ($v) exit $? after $(($(date +%s) - T0)) s"
    sed -n '/^| decode/,$p' "$OUT/sweep$n.log" | tail -1
    grep -E "Error|error:" "$OUT/sweep$n.log" | head -3
  done
  (cd "$OUT" && tar -czf sweep.tgz sweep*/ sweep*.log && rm -rf sweep*/ sweep*.log)
}

if [ "$step" = call1 ] && [ "${DECODE:-sweep}" = sweep ]; then
  sweep
  if [ -f "$OLD_LIB" ]; then
    ab_gate "$OLD_LIB" "(ii)"
  else
    echo "(ii) no library of $OLD_COMMIT ($OLD_LIB): run prep here and carry .devwork/i40close.tgz"
  fi
  logs=(ab.log gate.err)
elif [ "$step" = call1 ]; then  # DECODE=rows
  T0=$(date +%s)
  timeout "${DECODE_S:-150}" python3 benchmarks/h200/h200_issue40_close.py decode --out "$OUT" "${DECODE_ARGS[@]}" \
    >"$OUT/decode.log" 2>&1
  echo "(i) decode exit $? after $(($(date +%s) - T0)) s"
  sed -n '/^| decode/,$p' "$OUT/decode.log"
  grep -E "Error|error:" "$OUT/decode.log" | head -5
  if [ -f "$OLD_LIB" ]; then
    ab_gate "$OLD_LIB" "(ii)"
  else
    echo "(ii) no library of $OLD_COMMIT ($OLD_LIB): run prep here and carry .devwork/i40close.tgz"
  fi
  logs=(decode.log ab.log gate.err)
elif [ "$step" = stair ]; then
  # RA_CUDA_STAIR_EXACT=1 on the device: (iv) the GPU test tier (GPU_TESTS; among them the staircase
  # tests: a NaN/Inf in the diagonal's V against the fp64 reference on the flag-1 build, the gap
  # build's gap; STAIR_TESTS_S its time limit, 300 s), then (v) the suites' v2 perf
  # cases of the flag-1 library with the gap library (=0) in an A/B phase of the same rounds
  # (h200_v2.py --ab-lib, the suite context's ab_baseline): what exactness costs the causal tiles
  # STAIR_VALUES (default 1): the RA_CUDA_STAIR_EXACT values to measure, one after the other, each
  # with its own tests and its own A/B run against the gap build (its files suffixed -VALUE when
  # STAIR_VALUES is set; unsuffixed, as before, when it is not)
  DEF_LIB=$(lib_of "$BACKEND" -DRA_CUDA_STAIR_EXACT=0) AB_LABEL=stair0 AB_WHAT="the gap build (=0)"
  if [ -f "$WORK/base/COMMIT" ]; then  # prep-stair with STAIR_BASE: that commit's default library instead
    DEF_LIB=$PWD/$WORK/base/base-libregress_attn_cuda.so AB_LABEL=base
    AB_WHAT="commit $(cat "$WORK/base/COMMIT")'s default library"
    [ -f "$DEF_LIB" ] || { echo "no $DEF_LIB: run prep-stair with STAIR_BASE here first"; exit 2; }
  fi
  logs=()
  for sv in ${STAIR_VALUES:-1}; do
    sfx=""; [ -n "${STAIR_VALUES:-}" ] && sfx="-$sv"
    STAIR_LIB=$(lib_of "$BACKEND" "-DRA_CUDA_STAIR_EXACT=$sv")
    T0=$(date +%s)
    if [ "$DEVICE" = cpu ]; then
      echo "(iv) the GPU tests need the GPU: skipped in the dry run"
    elif [ "${STAIR_TESTS:-1}" = 0 ]; then
      echo "(iv) the GPU tests not run (STAIR_TESTS=0)"
    else
      # the whole GPU tier (the default library is the flag's since 2026-12-06; the staircase tests
      # alone missed a stale v2 test for a day): STAIR_TESTS_K=staircase narrows it as before
      REGRESS_STAIR_EXACT=$sv timeout "${STAIR_TESTS_S:-300}" python3 -m pytest -n 0 -q -rs -m "" -p no:cacheprovider \
        "${GPU_TESTS[@]}" ${STAIR_TESTS_K:+-k "$STAIR_TESTS_K"} >"$OUT/stair-tests$sfx.log" 2>&1
      echo "(iv) RA_CUDA_STAIR_EXACT=$sv GPU tests ${STAIR_TESTS_K:+(-k $STAIR_TESTS_K) }exit $? after $(($(date +%s) - T0)) s: $(tail -1 "$OUT/stair-tests$sfx.log")"
      grep -E "^(FAILED|ERROR)|SKIPPED" "$OUT/stair-tests$sfx.log" | head -12
      logs+=("stair-tests$sfx.log")
    fi
    T0=$(date +%s)
    timeout $(($(left) - 30)) python3 benchmarks/h200/h200_v2.py --out "$OUT" --suites perf --lib "$STAIR_LIB" \
      --ab-lib "$DEF_LIB" --ab-label "$AB_LABEL" --iterations "${ITERS:-100}" \
      >"$OUT/v2.log" 2>&1
    echo "(v) v2 perf cases, the RA_CUDA_STAIR_EXACT=$sv library with $AB_WHAT in the A/B phase: exit $? after $(($(date +%s) - T0)) s"
    grep -E " (fail|error|skip|timeout) " "$OUT/v2.log" | head -8
    sed -n '/^| family/,$p' "$OUT/v2.log"
    mv "$OUT/v2.log" "$OUT/stair-v2$sfx.log"
    logs+=("stair-v2$sfx.log")
    [ -z "$sfx" ] || mv "$OUT/v2-results.json.gz" "$OUT/v2-results$sfx.json.gz"
  done
  # then, while the call has time (a device call may be all a session gets): call1's sweep and its
  # gate A/B against 4cc9352 (under the time left as its deadline)
  [ "${STAIR_ONLY:-0}" = 1 ] || [ "$(left)" -lt 150 ] || sweep
  if [ "${STAIR_ONLY:-0}" != 1 ] && [ "$(left)" -ge 240 ] && [ -f "$OLD_LIB" ]; then
    ab_gate "$OLD_LIB" "(ii)"
  else
    echo "(ii) not run: $(left) s left"
  fi
  logs+=(ab.log gate.err)
elif [ "$step" = aa ]; then
  # the gate calibration's clean A/B redone as a true A/A: this tree's library against a byte-identical
  # copy (a second file, so a module of its own), through the perf suite's A/B and the gate
  NEW_LIB=$(lib_of "$BACKEND")
  cp "$NEW_LIB" /tmp/aa-copy.so
  ab_gate /tmp/aa-copy.so "(aa)"
  logs=(ab.log gate.err)
elif [ "$step" = call2 ]; then
  T0=$(date +%s)
  deadline=${NIGHTLY_DEADLINE:-$(($(left) - 45))}
  timeout $((deadline + 30)) python3 -m regress nightly --backend "$BACKEND" "${STACK[@]}" --suites ulp,determinism \
    "${QUICK[@]}" --deadline "$deadline" --db "sqlite:///$OUT/nightly.db" --out "$OUT/nightly" --trigger device-run \
    --runner h200-lent >"$OUT/nightly.log" 2>&1
  echo "(iii) nightly ulp,determinism exit $? after $(($(date +%s) - T0)) s (deadline $deadline s)"
  tail -12 "$OUT/nightly.log"
  keep_bundle "$OUT/nightly" nightly >/dev/null || echo "(iii) no bundle written"
  logs=(nightly.log)
elif [ "$step" = control ]; then
  # (ii)'s A/A control (benchmarks/h200/h200_ab_control.py): 4cc9352's library and this tree's, each
  # beside a byte-identical copy of itself, then against each other in both orders, on the gate's
  # flagged shape (2, 40, 1024, 77) and two neighbours; every pair a run of its own
  cp "$OLD_LIB" /tmp/old2.so
  NEW_LIB=$(lib_of "$BACKEND")
  cp "$NEW_LIB" /tmp/new2.so
  dry=(); [ "$DEVICE" = cpu ] && dry=(--dry-run)
  # CONTROL_PAIRS, CONTROL_SHAPES, CONTROL_MODES narrow it; arguments after `control` go to the script
  # (--block-seed N, --prime-cycles N: the method's variants)
  pairs=(); for p in ${CONTROL_PAIRS:-old:old2 new:new2 old:new new:old}; do pairs+=(--pair "$p"); done
  shapes=(); for s in ${CONTROL_SHAPES:-2:40:1024:77 2:24:4096:77 2:24:4096:256}; do shapes+=(--shape "$s"); done
  timeout $(($(left) - 20)) python3 benchmarks/h200/h200_ab_control.py "${dry[@]}" --lib old="$OLD_LIB" \
    --lib old2=/tmp/old2.so --lib new="$NEW_LIB" --lib new2=/tmp/new2.so "${pairs[@]}" "${shapes[@]}" \
    --modes "${CONTROL_MODES:-rtne,rtna,rtz}" --rounds "${CONTROL_ROUNDS:-400}" --out "$OUT" "${@:2}" \
    >"$OUT/control.log" 2>&1
  echo "control exit $? after $(($(date +%s) - T_START)) s"
  echo "| pair | shape | mode | first ms | second ms | second / first | p |"
  echo "|---|---|---|---|---|---|---|"
  grep "^|" "$OUT/control.log"
  tail -3 "$OUT/control.log" | grep -v "^|"
  gzip -f "$OUT/ab_control.json" 2>/dev/null
  exit 0
else
  echo "unknown step $step: prep, call1, call2, control, aa or stair"
  exit 2
fi
# at most 8 files come back, none in a folder more than 2 down: the logs and reports in one archive
(cd "$OUT" && tar -czf logs.tgz "${logs[@]}" $(ls -d gate 2>/dev/null) 2>/dev/null; rm -rf "${logs[@]}" ab nightly gate ab.db* nightly.db*)
ls -la "$OUT"
python3 benchmarks/h200/h200_issue40_close.py table "$OUT"
