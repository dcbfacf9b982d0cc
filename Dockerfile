# lockproxy in a container: a static binary on distroless, running as non-root.
#   docker build -t lockproxy .
#   docker run -p 7379:7379 -p 7380:7380 lockproxy -backends redis://r1:6379,redis://r2:6379,redis://r3:6379
# Arguments are added to the configuration baked in at
# /etc/lockproxy/lockproxy.toml (deploy/docker/lockproxy.toml: listen on
# 0.0.0.0:7379, metrics on 0.0.0.0:7380); mount a file over it to replace it:
#   docker run -v $PWD/lockproxy.toml:/etc/lockproxy/lockproxy.toml:ro ... lockproxy

# Exact tags, so a rebuild gets the same toolchain; bump them on purpose.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
# Modules first, so editing the source does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Stamped as make release stamps it (-version, INFO, lockproxy_build_info):
#   docker build --build-arg VERSION=$(git describe --tags) --build-arg REVISION=$(git rev-parse --short=12 HEAD) .
# Left empty, the binary names itself from its build information.
ARG VERSION= REVISION=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" -o /out/lockproxy .

# Only for its wget, a single static binary: distroless has no HTTP client
# for the HEALTHCHECK, and lockproxy has no probe mode of its own.
FROM busybox:1.37.0-musl AS busybox

# static: no libc needed by a CGO_ENABLED=0 binary; nonroot: uid 65532.
# Distroless publishes no version tags, only the Debian release and
# digests: pin a digest (static-debian12:nonroot@sha256:...) in a release
# pipeline that also updates it.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockproxy /lockproxy
COPY --from=busybox /bin/busybox /busybox
COPY deploy/docker/lockproxy.toml /etc/lockproxy/lockproxy.toml
USER nonroot:nonroot
# 7379: RESP (the lock commands); 7380: Prometheus metrics, health, status page.
EXPOSE 7379 7380
# /healthz answers while the process serves (not whether a quorum counts:
# that is /readyz, which a restart would not fix). If you move the metrics
# address, override this with docker run --health-cmd.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
	CMD ["/busybox", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:7380/healthz"]
# The defaults live in the file, so docker run's arguments add to them
# instead of replacing them (as a CMD would).
ENTRYPOINT ["/lockproxy", "-config", "/etc/lockproxy/lockproxy.toml"]
