#!/usr/bin/env bash
# Install (if missing) and start the services the tests use: PostgreSQL and Redis, on loopback.
# Idempotent: safe to run again while they are up. Exports nothing; tests find them at
#   postgresql://postgres:postgres@127.0.0.1:5432   and   redis://127.0.0.1:6379
set -euo pipefail

# One run at a time on this machine: the two lines' `make test` (side by side in .ci/run) each run
# this script, and two `ALTER USER`s of the same role at once fail ("tuple concurrently updated"), as
# do two apt-gets. A second run waits here for the first, then finds everything up. flock -o holds the
# lock in its own process, so the servers started below do not inherit it.
if [ -z "${PATCHSET_SERVICES_LOCKED:-}" ]; then
  exec env PATCHSET_SERVICES_LOCKED=1 flock -o "${PATCHSET_SERVICES_LOCK:-/tmp/airflow-patchset-services.lock}" bash "$0" "$@"
fi

apt_updated=0
need() {  # need <command-or-path> <debian packages...>
  local probe=$1; shift
  if ! command -v "$probe" >/dev/null 2>&1 && [ ! -e "$probe" ]; then
    if [ $apt_updated -eq 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq; apt_updated=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  fi
}

need pg_ctlcluster postgresql
need redis-server redis-server
# The UI browser test (tests/ui) drives Debian's headless Chromium; no browser is downloaded.
need chromium chromium
# The monitoring assets (monitoring/, tests/operations) are checked with Prometheus's own promtool and
# a real Prometheus server (Debian's prometheus package ships both; its service is not started here).
need promtool prometheus

pg_version=$(ls /usr/lib/postgresql | sort -n | tail -1)
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$pg_version main$"; then
  pg_createcluster "$pg_version" main >/dev/null
fi
if ! pg_lsclusters -h | grep -q "^$pg_version *main .*online"; then
  pg_ctlcluster "$pg_version" main start
fi
for _ in $(seq 1 30); do
  su postgres -c "psql -qtAc 'select 1'" >/dev/null 2>&1 && break
  sleep 1
done
# The settings are written only when they are not in force yet: a run that finds them changes nothing.
if ! PGPASSWORD=postgres psql -h 127.0.0.1 -U postgres -d postgres -qtAc 'select 1' >/dev/null 2>&1; then
  su postgres -c "psql -qtAc \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
fi
# The HA and migration tests open many connections.
if [ "$(su postgres -c "psql -qtAc 'show max_connections'")" != "300" ]; then
  su postgres -c "psql -qtAc \"ALTER SYSTEM SET max_connections = 300\"" >/dev/null
  pg_ctlcluster "$pg_version" main restart
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --save '' --appendonly no >/dev/null
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.5; done
fi
echo "services: postgresql $pg_version on 127.0.0.1:5432, redis on 127.0.0.1:6379"
