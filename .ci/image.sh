#!/usr/bin/env bash
# Builds the container image's final stage with buildah (from Debian) out of
# a binary CI builds here: this machine reaches no image registry, so the
# Dockerfile's golang build stage is replaced by its "prebuilt" stage, fed
# the same /out tree. Then checks the image: non-root user, /data volume,
# HEALTHCHECK, and that the binary in it runs (version, healthcheck against
# a server started from the image's own root filesystem).
#
# The release script (.ci/release.sh) reuses it with:
#   IMAGE_BINARY   a static linux binary to put in the image instead of
#                  building one here
#   IMAGE_ARCH     the image's architecture (default: this machine's); the
#                  binary is only run when it is this machine's
#   IMAGE_TAG      the image's name (default localhost/enclave:ci)
#   IMAGE_ARCHIVE  where to write the image as a docker-archive tar (for
#                  "docker load -i"); without it the image is only checked
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

host_arch=$(go env GOARCH)
arch=${IMAGE_ARCH:-$host_arch}
tag=${IMAGE_TAG:-localhost/enclave:ci}

ctx=$(mktemp -d /tmp/enclave-image.XXXXXX)
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
  [ -n "${cid:-}" ] && { $B umount "$cid" >/dev/null 2>&1 || true; $B rm "$cid" >/dev/null 2>&1 || true; }
  $B rmi -f "$tag" >/dev/null 2>&1 || true
  rm -rf "$ctx"
}
trap cleanup EXIT

# The same tree the Dockerfile's build stage makes in /out.
mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/data"
if [ -n "${IMAGE_BINARY:-}" ]; then
  cp "$IMAGE_BINARY" "$ctx/rootfs/enclave"
  chmod 0755 "$ctx/rootfs/enclave"
else
  CGO_ENABLED=0 GOARCH=$arch go build -trimpath -tags grpcnotrace -ldflags "-s -w" -o "$ctx/rootfs/enclave" ./cmd/enclave
fi
if file "$ctx/rootfs/enclave" 2>/dev/null | grep -q 'dynamically linked'; then
  echo "the binary is not static"; exit 1
fi
cp /etc/ssl/certs/ca-certificates.crt "$ctx/rootfs/etc/ssl/certs/"
echo 'enclave:x:65532:65532:enclave:/data:/enclave' > "$ctx/rootfs/etc/passwd"
echo 'enclave:x:65532:' > "$ctx/rootfs/etc/group"

$B bud --isolation chroot --format docker --arch "$arch" --os linux --build-arg FILES=prebuilt -f "$root/Dockerfile" -t "$tag" "$ctx"

inspect() { $B inspect --format "$1" "$tag"; }
user=$(inspect '{{.Docker.Config.User}}')
health=$(inspect '{{.Docker.Config.Healthcheck.Test}}')
volumes=$(inspect '{{.Docker.Config.Volumes}}')
entry=$(inspect '{{.Docker.Config.Entrypoint}}')
echo "user=$user healthcheck=$health volumes=$volumes entrypoint=$entry"
[ "$user" = "65532:65532" ] || { echo "image does not run as the non-root user"; exit 1; }
case "$health" in *healthcheck*) ;; *) echo "no HEALTHCHECK"; exit 1 ;; esac
case "$volumes" in */data*) ;; *) echo "no /data volume"; exit 1 ;; esac
image_arch=$(inspect '{{.OCIv1.Architecture}}')
[ "$image_arch" = "$arch" ] || { echo "image architecture $image_arch, want $arch"; exit 1; }

cid=$($B from "$tag")
mnt=$($B mount "$cid")
ls -ln "$mnt" "$mnt/data"
[ "$(stat -c %u "$mnt/data")" = 65532 ] || { echo "/data is not owned by the non-root user"; exit 1; }
[ "$(stat -c %u "$mnt/enclave")" = 0 ] || { echo "the binary is writable by the service user"; exit 1; }

archive() {
  [ -n "${IMAGE_ARCHIVE:-}" ] || return 0
  rm -f "$IMAGE_ARCHIVE"
  $B push --format docker "$tag" "docker-archive:$IMAGE_ARCHIVE:${tag#localhost/}"
  echo "wrote $IMAGE_ARCHIVE"
}
if [ "$arch" != "$host_arch" ]; then
  archive
  echo "image OK (the $arch binary is not run on this $host_arch machine)"
  exit 0
fi
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
archive
echo "image OK"
