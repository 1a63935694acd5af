#!/usr/bin/env bash
# Builds a release of enclave into OUTDIR (default dist/VERSION):
#
#   enclave_VERSION_OS_ARCH.tar.gz         the binary (static, CGO_ENABLED=0,
#                                          stripped), LICENSE and README.md,
#                                          for linux and darwin on amd64 and arm64
#   enclave_VERSION_OS_ARCH.cdx.json       each binary's SBOM (CycloneDX 1.5,
#                                          from the build info in the binary)
#   enclave_VERSION_image_linux_ARCH.tar   the container image enclave:VERSION
#                                          for amd64 and arm64 ("docker load -i";
#                                          a "+" in VERSION becomes "_" in the tag)
#   SHA256SUMS                             the SHA-256 of every file above
#
#   .ci/release.sh v1.2.3 [OUTDIR]
#
# The binaries are the default build: no cloud drivers (an operator who
# needs them builds with -tags aws,gcp,azure or -tags full; see
# docs/deployment.md), built with -tags grpcnotrace (see docs/deployment.md,
# "The binary's size"). Timestamps come from the commit (SOURCE_DATE_EPOCH),
# so the same commit gives the same archives. Needs Go, git, tar, gzip and,
# for the image, buildah (installed from Debian by .ci/image.sh if missing);
# RELEASE_IMAGE=0 skips the image.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

version=${1:-}
if ! [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]]; then
  echo "usage: .ci/release.sh VERSION [OUTDIR]   (VERSION like v1.2.3 or v1.2.3-rc.1)" >&2
  exit 2
fi
out=${2:-dist/$version}
mkdir -p "$out"
out=$(cd "$out" && pwd)

commit=$(git rev-parse HEAD 2>/dev/null || echo "")
if [ -n "$commit" ] && [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  echo "warning: the work tree has uncommitted changes; the binaries say commit $commit+dirty" >&2
  commit="$commit+dirty"
fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

pkg=github.com/enclave-mcp/enclave/internal/version
ldflags="-s -w -X $pkg.version=$version"
[ -n "$commit" ] && ldflags="$ldflags -X $pkg.commit=$commit"

work=$(mktemp -d /tmp/enclave-release.XXXXXX)
trap 'rm -rf "$work"' EXIT
go build -o "$work/sbom" ./internal/sbom

artifacts=()
for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
  os=${target%/*} arch=${target#*/}
  name=enclave_${version}_${os}_${arch}
  dir=$work/$name
  mkdir -p "$dir"
  echo "== $name"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -tags grpcnotrace -ldflags "$ldflags" -o "$dir/enclave" ./cmd/enclave
  # Check what was built: the platform and the version in its build info.
  go version -m "$dir/enclave" >"$work/$name.buildinfo"
  grep -qE "^\s+build\s+GOOS=$os$" "$work/$name.buildinfo" || { echo "$name: not a $os binary"; exit 1; }
  grep -qE "^\s+build\s+GOARCH=$arch$" "$work/$name.buildinfo" || { echo "$name: not an $arch binary"; exit 1; }
  grep -qE "^\s+build\s+CGO_ENABLED=0$" "$work/$name.buildinfo" || { echo "$name: built with cgo"; exit 1; }
  if [ "$os" = linux ] && command -v file >/dev/null 2>&1 && file "$dir/enclave" | grep -q 'dynamically linked'; then
    echo "$name: the binary is not static"; exit 1
  fi
  if [ "$os" = "$(go env GOHOSTOS)" ] && [ "$arch" = "$(go env GOHOSTARCH)" ]; then
    got=$("$dir/enclave" --version | head -1)
    [ "$got" = "enclave $version" ] || { echo "$name: --version says \"$got\""; exit 1; }
    host_binary=$dir/enclave
  fi
  printf '%s: %s bytes\n' "$name" "$(stat -c %s "$dir/enclave")"
  cp LICENSE README.md "$dir/"
  touch -d "@$SOURCE_DATE_EPOCH" "$dir"/*
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    -C "$dir" -cf - enclave LICENSE README.md | gzip -9n >"$out/$name.tar.gz"
  "$work/sbom" "$dir/enclave" >"$out/$name.cdx.json"
  artifacts+=("$name.tar.gz" "$name.cdx.json")
done

if [ "${RELEASE_IMAGE:-1}" != 0 ]; then
  for arch in amd64 arm64; do
    name=enclave_${version}_image_linux_${arch}
    echo "== $name"
    IMAGE_BINARY=$work/enclave_${version}_linux_${arch}/enclave IMAGE_ARCH=$arch \
      IMAGE_TAG=localhost/enclave:${version//+/_} IMAGE_ARCHIVE=$out/$name.tar \
      "$root/.ci/image.sh"
    artifacts+=("$name.tar")
  done
fi

(cd "$out" && sha256sum "${artifacts[@]}" >SHA256SUMS && sha256sum -c --quiet SHA256SUMS)
echo
echo "release $version in $out:"
(cd "$out" && ls -l "${artifacts[@]}" SHA256SUMS)
if [ -n "${host_binary:-}" ]; then "$host_binary" --version; fi
