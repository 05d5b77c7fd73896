#!/usr/bin/env bash
# The test command (README and .ci/run): installs what the tests need, starts PostgreSQL, runs
# ruff and pytest (every tier). GPU tests skip with their reason on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v clang-19 >/dev/null 2>&1 || need_apt+=(clang-19)
command -v llvm-objdump-19 >/dev/null 2>&1 || need_apt+=(llvm-19)
# clang-19 links HIP code objects with lld; without it every HIP build fails ("lld doesn't exist").
# llvm-mc-19 (llvm-19) and ld.lld-19 also assemble and link the emulator's hand-written test kernels.
command -v ld.lld-19 >/dev/null 2>&1 || need_apt+=(lld-19)
[ -x /usr/lib/postgresql/15/bin/pg_ctl ] || need_apt+=(postgresql-15)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "test.sh: missing ${need_apt[*]}; the tests that need them will skip" >&2
  fi
fi

REGRESS_EXTRAS=test bash scripts/setup.sh

# AITER v3's own code objects for the hip-emu comparison (issue 21): the amd-aiter wheel, fetched into
# the regress cache once (never committed). Without it those tests and nightly rows skip with the reason.
AITER_DIR=$("$PY" -c 'from regress.emu.peers.aiter import cache_root; print(cache_root())')
if ! ls "$AITER_DIR"/amd_aiter-*.whl >/dev/null 2>&1; then
  mkdir -p "$AITER_DIR"
  timeout 600 "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$AITER_DIR" amd-aiter \
    || echo "test.sh: downloading amd-aiter failed; the AITER comparisons will skip" >&2
fi
export REGRESS_AITER_NO_DOWNLOAD=1  # tried once above; the tests use the cached wheel or skip

if [ -x /usr/lib/postgresql/15/bin/pg_ctl ]; then
  # Our own throwaway cluster on a free private port, stopped on exit: a server already answering
  # on 5432 (the user's own) is never used by the tests.
  PGPORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  REGRESS_PGDATA=$(mktemp -d /tmp/regress-test-pg.XXXXXX)
  export PGPORT REGRESS_PGDATA
  stop_pg() {
    if [ "$(id -u)" = 0 ]; then
      runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$REGRESS_PGDATA" stop -m fast >/dev/null 2>&1 || true
    else
      /usr/lib/postgresql/15/bin/pg_ctl -D "$REGRESS_PGDATA" stop -m fast >/dev/null 2>&1 || true
    fi
    rm -rf "$REGRESS_PGDATA"
  }
  trap stop_pg EXIT
  [ "$(id -u)" = 0 ] && chown postgres "$REGRESS_PGDATA" 2>/dev/null || true
  REGRESS_TEST_POSTGRES_URL=$(bash .ci/pg.sh)
  export REGRESS_TEST_POSTGRES_URL
fi

"$PY" -m ruff check .
"$PY" -m ruff format --check .
# Types: strict on every module of regress/ (pyproject [tool.mypy]; every ignore names its error and is checked).
"$PY" -m mypy

set +e
# -m "": every tier, slow, e2e and the PostgreSQL copies included (plain pytest leaves them out:
# pyproject's addopts). -n 0: one process, as the timing-sensitive slow tests (drills, A/B) expect.
"$PY" -m pytest -m "" -n 0 "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure here" >&2
  exit 1
fi
exit $rc
