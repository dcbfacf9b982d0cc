# The project's commands. `make test` is the test command the README and CI use.

GO ?= go

.PHONY: build run test redis-server

## build: the binary, as the README builds it.
build:
	$(GO) build -o lockproxy .

## run: build, then run with ARGS, e.g. make run ARGS='-config lockproxy.toml'.
run: build
	./lockproxy $(ARGS)

## test: every test, with the race detector, against real redis-server processes.
test: redis-server
	$(GO) test -race -count=1 ./...

# The tests start their own redis-server processes (internal/redistest) and
# fail rather than skip without one, so make sure it is there first.
redis-server:
	@if ! command -v redis-server >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "redis-server not found: installing it with apt-get"; \
			apt-get update && apt-get install -y redis-server redis-tools; \
		else \
			echo "redis-server not found; the tests need it. Install it with:" >&2; \
			echo "  sudo apt-get install -y redis-server redis-tools" >&2; \
			exit 1; \
		fi; \
	fi
