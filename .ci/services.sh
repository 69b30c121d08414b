#!/usr/bin/env bash
# Install (if missing) and start the services the tests use: PostgreSQL and Redis, on loopback.
# Idempotent: safe to run again while they are up. Exports nothing; tests find them at
#   postgresql://postgres:postgres@127.0.0.1:5432   and   redis://127.0.0.1:6379
set -euo pipefail

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
su postgres -c "psql -qtAc \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
# The HA and migration tests open many connections.
su postgres -c "psql -qtAc \"ALTER SYSTEM SET max_connections = 300\"" >/dev/null
if [ "$(su postgres -c "psql -qtAc 'show max_connections'")" != "300" ]; then
  pg_ctlcluster "$pg_version" main restart
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --save '' --appendonly no >/dev/null
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.5; done
fi
echo "services: postgresql $pg_version on 127.0.0.1:5432, redis on 127.0.0.1:6379"
