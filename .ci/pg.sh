#!/usr/bin/env bash
# Starts a throwaway PostgreSQL 15 cluster on 127.0.0.1:${PGPORT:-5432} for the tests (trust auth,
# so no password is ever written down), and prints the URL to export as REGRESS_TEST_POSTGRES_URL.
# Idempotent: a cluster that already answers is reused. Root cannot run postgres, so the cluster
# belongs to the `postgres` user. Usage: export REGRESS_TEST_POSTGRES_URL=$(bash .ci/pg.sh)
# PG_FSYNC=on for honest durability figures (the ingest benchmark); off is faster for tests.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGPORT=${PGPORT:-5432}
PGDATA=${REGRESS_PGDATA:-/tmp/regress-pg-$PGPORT}
URL="postgresql://postgres@127.0.0.1:$PGPORT/postgres"

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

if [ ! -x "$PGBIN/pg_ctl" ]; then
  echo "pg.sh: PostgreSQL 15 binaries not found in $PGBIN (apt-get install postgresql-15)" >&2
  exit 2
fi
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi

if "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT"; then
  echo "$URL"
  exit 0
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA"
  [ "$(id -u)" = 0 ] && chown postgres "$PGDATA"
  as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 >/dev/null
fi
# Sockets in the data dir: /var/run/postgresql may not exist or belong to us.
as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" -w -t 60 \
  -o "-h 127.0.0.1 -p $PGPORT -k $PGDATA -c max_connections=200 -c fsync=${PG_FSYNC:-off}" start >/dev/null
echo "$URL"
