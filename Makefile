# The project's commands. `make test` is the test command the README and CI use.

GO ?= go

.PHONY: build run test fuzz deps

## build: the binary, as the README builds it.
build:
	$(GO) build -o lockproxy .

## run: build, then run with ARGS, e.g. make run ARGS='-config lockproxy.toml'.
run: build
	./lockproxy $(ARGS)

## test: every test, with the race detector, against real redis-server processes
## and the real client libraries of the compatibility suite. One package at a
## time (-p 1): the fault tests time backends out on purpose, and another
## package's load on this 2-core machine must not do it for them. The test
## package, the compatibility suite's JVM and Python runs among it, takes
## over go test's default 10 minutes under -race.
test: deps
	$(GO) test -race -count=1 -p 1 -timeout 20m ./...

## fuzz: each native fuzz target of proxy/ for FUZZTIME (go test -fuzz takes
## one target at a time); inputs that fail land in proxy/testdata/fuzz.
## FuzzScriptDifferential runs what the recogniser serves on real
## redis-servers, through the proxy and directly, and compares.
FUZZTIME ?= 10s
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
