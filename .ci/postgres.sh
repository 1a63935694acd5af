#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster on loopback and prints the URL to
# use as ENCLAVE_TEST_POSTGRES. Usage: .ci/postgres.sh start DIR PORT | stop DIR
# Installs the server from Debian packages when it is missing.
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?data dir}
port=${3:-55432}

pgbin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$d" ] && [ -x "$d/initdb" ] && echo "$d"
}

case "$cmd" in
start)
  if ! pgbin >/dev/null; then
    echo "installing postgresql from Debian packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
  fi
  bin=$(pgbin)
  # PostgreSQL refuses to run as root: run it as the unprivileged postgres
  # user (created by the Debian package), or as ourselves when not root.
  as=()
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    as=(runuser -u postgres --)
  fi
  rm -rf "$dir"; mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  "${as[@]}" "$bin/initdb" -D "$dir/data" -U enclave --auth=trust --no-sync -E UTF8 >/dev/null
  "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" start >&2
  "$bin/psql" -h 127.0.0.1 -p "$port" -U enclave -d postgres -qc 'CREATE DATABASE enclave_test' >&2
  echo "postgres://enclave@127.0.0.1:$port/enclave_test?sslmode=disable"
  ;;
stop)
  bin=$(pgbin) || exit 0
  as=()
  [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
  [ -d "$dir/data" ] && "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
  rm -rf "$dir"
  ;;
*) echo "usage: $0 start DIR [PORT] | stop DIR" >&2; exit 2 ;;
esac
