# syntax=docker/dockerfile:1
#
# enclave container image: a static, CGO-free binary on an empty base.
#
#   docker build -t enclave .
#   docker build --build-arg TAGS=aws -t enclave .    # with the AWS drivers
#   docker run -p 8080:8080 -v enclave-data:/data enclave
#
# A release's image is also an artifact of .ci/release.sh
# (enclave_VERSION_image_linux_ARCH.tar, for "docker load -i").
#
# The final image is FROM scratch: the binary, CA certificates, a passwd
# entry for the non-root user 65532, and /data (a volume, owned by that
# user) holding the SQLite database, blobs and keeper.key. HEALTHCHECK runs
# "enclave healthcheck", which probes /readyz (there is no shell or curl).
#
# Without a registry, CI builds the binary itself and fills the "prebuilt"
# stage from a directory (see .ci/image.sh):
#
#   buildah bud --format docker --build-arg FILES=prebuilt -f Dockerfile DIR
#
# where DIR/rootfs holds exactly what the build stage puts in /out.

# FILES names the stage whose /out becomes the image: "build" (compile
# here, the default) or "prebuilt" (take a CI-built tree).
ARG FILES=build
ARG GO_IMAGE=golang:1.26-bookworm

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION, when set, is the release version shown by "enclave version",
# the MCP serverInfo and /readyz; otherwise the build info's. TAGS links
# cloud drivers: "aws", "gcp", "azure" (comma-separated) or "full"; the
# default image has only the file, mem and local-key drivers. grpcnotrace
# is always on: see docs/deployment.md, "The binary's size".
ARG VERSION=""
ARG TAGS=""
RUN CGO_ENABLED=0 go build -trimpath -tags "grpcnotrace${TAGS:+,$TAGS}" \
      -ldflags "-s -w -X github.com/enclave-mcp/enclave/internal/version.version=${VERSION}" \
      -o /out/rootfs/enclave ./cmd/enclave \
 && mkdir -p /out/rootfs/etc/ssl/certs /out/data \
 && cp /etc/ssl/certs/ca-certificates.crt /out/rootfs/etc/ssl/certs/ \
 && echo 'enclave:x:65532:65532:enclave:/data:/enclave' > /out/rootfs/etc/passwd \
 && echo 'enclave:x:65532:' > /out/rootfs/etc/group

FROM scratch AS prebuilt
COPY rootfs/ /out/rootfs/
COPY data/ /out/data/

FROM ${FILES} AS files

FROM scratch
COPY --from=files /out/rootfs/ /
COPY --from=files --chown=65532:65532 /out/data/ /data/
USER 65532:65532
ENV ENCLAVE_ADDR=0.0.0.0:8080 \
    ENCLAVE_DATA_DIR=/data \
    ENCLAVE_LOG_FORMAT=json
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 CMD ["/enclave", "healthcheck"]
ENTRYPOINT ["/enclave"]
CMD ["serve"]
