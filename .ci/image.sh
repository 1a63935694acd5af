#!/usr/bin/env bash
# Builds the container image's final stage with buildah (from Debian) out of
# a binary CI builds here: this machine reaches no image registry, so the
# Dockerfile's golang build stage is replaced by its "prebuilt" stage, fed
# the same /out tree. Then checks the image: non-root user, /data volume,
# HEALTHCHECK, and that the binary in it runs (version, healthcheck against
# a server started from the image's own root filesystem).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if ! command -v buildah >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq buildah >/dev/null
fi
buildah --version
B="buildah --storage-driver vfs"

ctx=$(mktemp -d /tmp/enclave-image.XXXXXX)
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
  [ -n "${cid:-}" ] && { $B umount "$cid" >/dev/null 2>&1 || true; $B rm "$cid" >/dev/null 2>&1 || true; }
  $B rmi -f localhost/enclave:ci >/dev/null 2>&1 || true
  rm -rf "$ctx"
}
trap cleanup EXIT

# The same tree the Dockerfile's build stage makes in /out.
mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/data"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ctx/rootfs/enclave" ./cmd/enclave
if file "$ctx/rootfs/enclave" 2>/dev/null | grep -q 'dynamically linked'; then
  echo "the binary is not static"; exit 1
fi
cp /etc/ssl/certs/ca-certificates.crt "$ctx/rootfs/etc/ssl/certs/"
echo 'enclave:x:65532:65532:enclave:/data:/enclave' > "$ctx/rootfs/etc/passwd"
echo 'enclave:x:65532:' > "$ctx/rootfs/etc/group"

$B bud --isolation chroot --format docker --build-arg FILES=prebuilt -f "$root/Dockerfile" -t localhost/enclave:ci "$ctx"

inspect() { $B inspect --format "$1" localhost/enclave:ci; }
user=$(inspect '{{.Docker.Config.User}}')
health=$(inspect '{{.Docker.Config.Healthcheck.Test}}')
volumes=$(inspect '{{.Docker.Config.Volumes}}')
entry=$(inspect '{{.Docker.Config.Entrypoint}}')
echo "user=$user healthcheck=$health volumes=$volumes entrypoint=$entry"
[ "$user" = "65532:65532" ] || { echo "image does not run as the non-root user"; exit 1; }
case "$health" in *healthcheck*) ;; *) echo "no HEALTHCHECK"; exit 1 ;; esac
case "$volumes" in */data*) ;; *) echo "no /data volume"; exit 1 ;; esac

cid=$($B from localhost/enclave:ci)
mnt=$($B mount "$cid")
ls -ln "$mnt" "$mnt/data"
[ "$(stat -c %u "$mnt/data")" = 65532 ] || { echo "/data is not owned by the non-root user"; exit 1; }
[ "$(stat -c %u "$mnt/enclave")" = 0 ] || { echo "the binary is writable by the service user"; exit 1; }
"$mnt/enclave" version

# Serve from the image's filesystem and probe it with the image's own
# healthcheck command.
data=$(mktemp -d "$ctx/run.XXXXXX")
port=$(( 20000 + RANDOM % 20000 ))
ENCLAVE_ADDR=127.0.0.1:$port ENCLAVE_DATA_DIR=$data "$mnt/enclave" serve >"$ctx/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  if ENCLAVE_ADDR=127.0.0.1:$port "$mnt/enclave" healthcheck >/dev/null 2>&1; then break; fi
  sleep 0.1
done
ENCLAVE_ADDR=127.0.0.1:$port "$mnt/enclave" healthcheck
kill -TERM "$pid"; wait "$pid"; pid=
echo "image OK"
