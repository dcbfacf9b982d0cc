# The project's commands. `make test` is the test command the README and CI use.

GO ?= go

.PHONY: build run test test-long fuzz deps release peers

## build: the binary, stamped with the version and commit that -version,
## INFO and lockproxy_build_info report (VERSION and REVISION, below).
build:
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.revision=$(REVISION)" -o lockproxy .

## run: build, then run with ARGS, e.g. make run ARGS='-config lockproxy.toml'.
run: build
	./lockproxy $(ARGS)

## test: every test, with the race detector, against real redis-server processes
## and the real client libraries of the compatibility suite, and prints its
## wall time at the end, pass or fail. The packages but the end-to-end one
## run two at a time (-p 2): the engine's tests step time where they wait for
## it (quorum's newSteppedCluster), and their backend timeouts are generous.
## The model checker of the admission decisions runs beside them, without
## -race (it shares no memory, and the detector would slow it tenfold), and
## prints the states it explored and its negative controls at the end. The
## end-to-end package runs its tests four at a time: a few timing-sensitive
## ones alone first, then those of the proxy (proxyTest, one heavy safety run
## or build among them at a time), then the client tests (clientTest)
## against a proxy built without -race; its JVM and Python runs take it past
## go test's default 10 minutes under -race.
test: deps
	@start=$$(date +%s); model=$$(mktemp); \
	trap 'rm -f $$model; echo "make test: $$(($$(date +%s) - start)) s of wall time"' EXIT; set -e; \
	$(GO) test -count=1 -v -run '^TestModel' ./quorum/internal/admit >$$model 2>&1 & modelpid=$$!; \
	set -x; \
	$(GO) test -race -count=1 -p 2 -timeout 20m -skip '^TestModel' $$($(GO) list ./... | grep -v '/test$$'); \
	$(GO) test -race -count=1 -parallel 4 -timeout 20m ./test; \
	set +x; \
	wait $$modelpid || { cat $$model; exit 1; }; \
	cat $$model

## test-long: the safety runs (every nemesis phase, the negative controls) for
## ten minutes each instead of make test's thirty seconds.
test-long: deps
	$(GO) test -race -count=1 -timeout 90m -run '^TestSafety' -v -safety.duration=10m ./test

## peers: other projects' own lock test suites (redis-py's, python-redis-lock's,
## redsync's, node-redlock's) at pinned releases, against plain redis-servers
## and through lockproxy, changing only the address; prints both tallies
## (docs/peers.md). Not in CI. PEERS='redsync node-redlock' runs only those.
peers:
	bash test/peers/run.sh

## fuzz: each native fuzz target of proxy/ for FUZZTIME (go test -fuzz takes
## one target at a time); inputs that fail land in proxy/testdata/fuzz.
## FuzzScriptDifferential runs what the recogniser serves on real
## redis-servers, through the proxy and directly, and compares.
## A count, not a duration: Go 1.26's fuzz coordinator can report its own
## -fuzztime deadline as a failure ("context deadline exceeded") when the
## machine is loaded (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 30000x
FUZZ_TARGETS = FuzzGuard FuzzParsers FuzzServer FuzzScriptDifferential

fuzz:
	@set -e; for f in $(FUZZ_TARGETS); do \
		echo "fuzz $$f for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./proxy; \
	done

# Debian packages the tests need: redis-server for the backends (the tests
# fail rather than skip without one), faketime for backends whose clock runs
# fast, postgresql for the fencing example's test, chromium to render the
# status page headless, prometheus (promtool) and systemd (systemd-analyze)
# to check deploy/, and the client libraries that the compatibility
# suite runs unchanged.
DEBS = redis-server redis-tools faketime postgresql chromium prometheus systemd python3-redis ruby-redis php-cli php-redis libredis-perl

deps:
	@missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing $$missing with apt-get"; \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
		else \
			echo "the tests need these Debian packages; install them with:" >&2; \
			echo "  sudo apt-get install -y $$missing" >&2; \
			exit 1; \
		fi; \
	fi

## release: static binaries (no cgo, paths trimmed) for every platform of
## PLATFORMS into DIST, named lockproxy-VERSION-OS-ARCH (.exe on Windows),
## and DIST/SHA256SUMS for sha256sum -c. VERSION defaults to git describe,
## which names the tag on a tagged commit (VERSION=v0.2.0 stamps one
## without it). DIST is emptied first, so that SHA256SUMS lists only this
## run. Two builds run at once (RELEASE_JOBS): one go build leaves a core
## idle while it compiles go-redis (a quarter of its CPU, in one package)
## and links, and the other build fills it. On an idle 2-core machine with
## a cold build cache, two at once took 300 s, one at a time 339 s (each
## platform costs about 100 s of CPU, so 2 cores cannot do it in much less);
## with a warm cache, seconds. Six at once only spent more CPU. Compiling
## no DWARF, which -w would strip, saves about a twentieth.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
REVISION ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
DIST ?= dist
PLATFORMS = linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64
RELEASE_JOBS ?= 2

release:
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@printf '%s\n' $(PLATFORMS) | xargs -P $(RELEASE_JOBS) -I PLATFORM sh -ec '\
		os=$${1%/*}; arch=$${1#*/}; exe=; [ $$os != windows ] || exe=.exe; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -gcflags=all=-dwarf=false \
			-ldflags "-s -w -X main.version=$(VERSION) -X main.revision=$(REVISION)" \
			-o $(DIST)/lockproxy-$(VERSION)-$$os-$$arch$$exe .' sh PLATFORM
	@cd $(DIST) && sha256sum lockproxy-$(VERSION)-* > SHA256SUMS && cat SHA256SUMS
