# lockproxy in a container: a static binary on distroless, running as non-root.
#   docker build -t lockproxy .
#   docker run -p 7379:7379 lockproxy -listen 0.0.0.0:7379 -backends redis://...

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so editing the source does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/lockproxy .

# static: no libc needed by a CGO_ENABLED=0 binary; nonroot: uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockproxy /lockproxy
USER nonroot:nonroot
# 7379: RESP (the lock commands); 9121: Prometheus metrics and health.
EXPOSE 7379 9121
ENTRYPOINT ["/lockproxy"]
# The binary listens on 127.0.0.1 by default, which nothing outside the
# container can reach. Arguments given to docker run replace these, so repeat
# -listen 0.0.0.0:7379 there.
CMD ["-listen", "0.0.0.0:7379", "-metrics", "0.0.0.0:9121"]
