#!/usr/bin/env bash
# make peers: other projects' own lock test suites, run as those projects
# run them, once against one plain redis-server and once through lockproxy
# (three backends), changing only the address; prints both tallies. Not in
# CI: the suites come from PyPI at their pinned releases, and take minutes.
#
#   redis-py 8.1.0        tests/test_lock.py, tests/test_asyncio/test_lock.py
#   python-redis-lock 4.0.0  tests/ (its fixtures start a redis-server on a
#                         Unix socket; python_redis_lock_conftest.py names
#                         the socket of the server under test instead)
#
# docs/peers.md explains every test that differs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${PEERS_DIR:-$root/.peers}
mkdir -p "$work"
cd "$work"

if [ ! -x venv/bin/python ]; then
	python3 -m venv venv
fi
venv/bin/pip install -q -r "$here/requirements.txt"
for sdist in redis==8.1.0 python-redis-lock==4.0.0; do
	name=${sdist%%==*}
	version=${sdist##*==}
	[ -d "$name-$version" ] && continue
	venv/bin/pip download -q --no-deps --no-binary :all: "$sdist" -d .
	tar xzf "$name-$version.tar.gz"
done
cp "$here/python_redis_lock_conftest.py" python-redis-lock-4.0.0/tests/conftest.py

(cd "$root" && go build -o "$work/lockproxy" .)

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_redis() { # port [unix socket]
	local args=(--port "$1" --save "" --appendonly no)
	[ $# -gt 1 ] && args+=(--unixsocket "$2")
	redis-server "${args[@]}" >/dev/null &
	pids+=($!)
}
plain=$(free_port)
start_redis "$plain" "$work/plain.sock"
backends=()
for _ in 1 2 3; do
	p=$(free_port)
	start_redis "$p"
	backends+=("redis://127.0.0.1:$p")
done
proxy=$(free_port)
# allow_flush: the suites' teardowns flush; max_ttl: python-redis-lock
# takes locks of up to 1000 s.
./lockproxy -listen "127.0.0.1:$proxy" -unix-socket "$work/proxy.sock" -backends "$(IFS=,; echo "${backends[*]}")" \
	-allow-flush=true -max-ttl 20m -restart-quarantine=false >"$work/lockproxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
	redis-cli -p "$proxy" ping >/dev/null 2>&1 && redis-cli -p "$plain" ping >/dev/null 2>&1 && break
	sleep 0.1
done

tally() { # label, then the pytest command (run with -rf)
	local label=$1
	shift
	local out
	out=$("$@" 2>&1 || true)
	printf '%-46s %s\n' "$label" "$(tail -1 <<<"$out")"
	# The tests that failed, each once, however many parameters it ran with.
	grep -E '^FAILED ' <<<"$out" | sed -E 's/^FAILED [^:]*::(.*::)?//; s/[[ ].*//' | sort | uniq -c | sed 's/^/    /' || true
}
for target in "redis:$plain" "lockproxy:$proxy"; do
	name=${target%%:*}
	port=${target##*:}
	sock=$work/plain.sock
	[ "$name" = lockproxy ] && sock=$work/proxy.sock
	(cd redis-8.1.0 && tally "redis-py 8.1.0 lock tests, $name" \
		../venv/bin/python -m pytest -q -p no:cacheprovider -p pytest_asyncio --asyncio-mode=auto \
		tests/test_lock.py tests/test_asyncio/test_lock.py --redis-url="redis://127.0.0.1:$port/9" -rf)
	(cd python-redis-lock-4.0.0 && PEER_SOCKET=$sock tally "python-redis-lock 4.0.0 tests, $name" \
		../venv/bin/python -m pytest -q -p no:cacheprovider tests -rf)
done
