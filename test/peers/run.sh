#!/usr/bin/env bash
# make peers: other projects' own lock test suites, run as those projects
# run them, once against plain redis-servers and once through lockproxy
# (three backends), changing only the address; prints both tallies. Not in
# CI: the suites come from PyPI, the Go module proxy, npm and GitHub at
# their pinned releases, and take minutes.
#
#   redis-py 8.1.0        tests/test_lock.py, tests/test_asyncio/test_lock.py
#   python-redis-lock 4.0.0  tests/ (its fixtures start a redis-server on a
#                         Unix socket; python_redis_lock_conftest.py names
#                         the socket of the server under test instead)
#   redsync v4.18.1       its package's tests (they start 48 redis-servers
#                         with tempredis; redsync_tempredis/ stands in for
#                         tempredis and names the servers started here)
#   node-redlock v5.0.0-beta.2  src/single.test.ts, from GitHub at the
#                         tag's commit (raw.githubusercontent.com, else a
#                         git mirror: NODE_REDLOCK_GIT), run with ava over
#                         the npm release of the same version
#
# PEERS="redsync node-redlock" runs only those (of redis-py,
# python-redis-lock, redsync, node-redlock). docs/peers.md explains every
# test that differs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${PEERS_DIR:-$root/.peers}
mkdir -p "$work"
cd "$work"
want() { [[ " ${PEERS:-redis-py python-redis-lock redsync node-redlock} " == *" $1 "* ]]; }

# --- The suites, at their pinned releases.

if want redis-py || want python-redis-lock; then
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
fi

# redsync: a copy of the module, its tempredis replaced by the stand-in
# and its first port (51200) by the stand-in's PEER_REDSYNC_BASE_PORT.
# The suite starts 6 blocks of 8 servers, one block per client kind.
redsync=redsync-4.18.1
redsync_servers=48
setup_redsync() {
	rm -rf "$redsync"
	cp -r "$(cd / && go mod download -json github.com/go-redsync/redsync/v4@v4.18.1 |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')" "$redsync"
	chmod -R u+w "$redsync"
	cd "$redsync"
	go mod edit -replace "github.com/stvp/tempredis=$here/redsync_tempredis"
	sed -i 's/\b51200\b/tempredis.PeerBasePort/' redsync_test.go
	if [ "$(grep -c 'tempredis\.PeerBasePort' redsync_test.go)" != 2 ]; then
		echo "redsync_test.go: 51200 is not where it was" >&2
		return 1
	fi
	# -race: as redsync's own make test runs it.
	GOFLAGS=-mod=mod go test -race -c -o redsync.test .
	cd "$work"
}
want redsync && setup_redsync

# node-redlock: its test file at the v5.0.0-beta.2 tag, compiled by its
# own tsconfig.json over the npm release's index (identical to what the
# tag's src/index.ts compiles to), with test/peers/node-redlock/package.json.
nr=node-redlock-5.0.0-beta.2
nr_commit=54de94cfd7e311b8972455811436d45538fe85ed # tag v5.0.0-beta.2
nr_git=${NODE_REDLOCK_GIT:-/work/.mirror/mike-marcacci+node-redlock/repo}
nr_fetch() { # path in the repository, destination
	curl -fsS -m 20 -o "$2" "https://raw.githubusercontent.com/mike-marcacci/node-redlock/$nr_commit/$1" 2>/dev/null ||
		git -C "$nr_git" show "$nr_commit:$1" >"$2" 2>/dev/null
}
setup_node_redlock() {
	mkdir -p "$nr"
	cp "$here/node-redlock/package.json" "$nr/"
	(cd "$nr" && npm install --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null)
	rm -rf "$nr/src" "$nr/dist"
	mkdir -p "$nr/src" "$nr/dist/esm"
	if ! nr_fetch src/single.test.ts "$nr/single.test.ts" || ! nr_fetch tsconfig.json "$nr/tsconfig.json"; then
		echo "node-redlock: src/single.test.ts at $nr_commit is on neither raw.githubusercontent.com nor $nr_git (NODE_REDLOCK_GIT): not run" >&2
		return 1
	fi
	cp "$nr/node_modules/redlock/dist/index.d.ts" "$nr/src/"
	cp "$nr/node_modules/redlock/dist/esm/index.js" "$nr/node_modules/redlock/dist/esm/package.json" "$nr/dist/esm/"
	# The address: the hosts of its docker-compose.yml become 127.0.0.1
	# and the ports of the servers under test. And the file's two
	# deployments, one Redis and one Redis Cluster, go to two files (ava
	# runs each file in a process of its own, as it runs a file's tests
	# concurrently): the cluster's before hook waits for a plain SET to
	# succeed, which through lockproxy it never does, and a file's before
	# hooks hold back all its tests.
	sed -e 's/new Redis({ host: "redis-single-instance" })/new Redis({ host: "127.0.0.1", port: Number(process.env.PEER_REDIS_PORT) })/' \
		-e 's/new Cluster(\[{ host: "redis-single-cluster-1" }\])/new Cluster([{ host: "127.0.0.1", port: Number(process.env.PEER_CLUSTER_PORT) }])/' \
		"$nr/single.test.ts" >"$nr/single.test.peer.ts"
	if [ "$(grep -c 'process\.env\.PEER_' "$nr/single.test.peer.ts")" != 2 ]; then
		echo "node-redlock single.test.ts: its addresses are not where they were: not run" >&2
		return 1
	fi
	grep -v '^run("cluster",' "$nr/single.test.peer.ts" >"$nr/src/single-instance.test.ts"
	grep -v '^run("instance",' "$nr/single.test.peer.ts" >"$nr/src/single-cluster.test.ts"
	(cd "$nr" && node_modules/.bin/tsc)
}
nr_ok=false
if want node-redlock && setup_node_redlock; then
	nr_ok=true
fi

(cd "$root" && go build -o "$work/lockproxy" .)

# --- Servers.

pids=()
cleanup() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
free_ports() { # n: the first of n consecutive ports that are free
	python3 - "$1" <<-'EOF'
		import random, socket, sys
		n = int(sys.argv[1])
		for _ in range(1000):
		    base = random.randrange(20000, 30000 - n)
		    socks = []
		    try:
		        for p in range(base, base + n):
		            s = socket.socket()
		            socks.append(s)
		            s.bind(("127.0.0.1", p))
		    except OSError:
		        continue
		    finally:
		        for s in socks:
		            s.close()
		    print(base)
		    break
	EOF
}
start_redis() { # port [redis-server options]
	local port=$1
	shift
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no "$@" >/dev/null &
	pids+=($!)
}
# lockproxy over the three backends, each of its URLs with /db: port, db,
# more flags. allow_flush: the suites' teardowns flush; max_ttl:
# python-redis-lock takes locks of up to 1000 s (PEERS_MAX_TTL=2h: what
# redsync's one-hour locks need).
start_proxy() {
	local port=$1 db=$2
	shift 2
	./lockproxy -listen "127.0.0.1:$port" -backends "$(printf "%s/$db," "${backends[@]}" | sed 's/,$//')" \
		-allow-flush=true -max-ttl "${PEERS_MAX_TTL:-20m}" -restart-quarantine=false "$@" >>"$work/lockproxy.log" 2>&1 &
	pids+=($!)
}
# Until a server answers (a proxy: until it can decide lock commands).
wait_ready() { # redis-cli arguments
	for _ in $(seq 100); do
		[ "$(redis-cli "$@" EXISTS peers:ready 2>/dev/null)" = 0 ] && return
		sleep 0.1
	done
	echo "no answer from redis-cli $*" >&2
	return 1
}
stop() { # pids
	kill "$@" 2>/dev/null || true
	wait "$@" 2>/dev/null || true
}

: >"$work/lockproxy.log"
plain=$(free_port)
start_redis "$plain" --unixsocket "$work/plain.sock"
backends=()
for _ in 1 2 3; do
	p=$(free_port)
	# Databases: 0 for the proxy of the Python suites and node-redlock's
	# instance, 1 for node-redlock's cluster, 2 to 49 for redsync's 48.
	start_redis "$p" --databases 64
	backends+=("redis://127.0.0.1:$p")
done
proxy=$(free_port)
start_proxy "$proxy" 0 -unix-socket "$work/proxy.sock"
wait_ready -p "$plain"
for b in "${backends[@]}"; do wait_ready -p "${b##*:}"; done
wait_ready -p "$proxy"

# --- Tallies.

# Each suite's whole output goes to $work/out/, under its label.
keep() { # label, output
	mkdir -p "$work/out"
	printf '%s\n' "$2" >"$work/out/$(tr -c 'A-Za-z0-9.\n-' _ <<<"$1").txt"
}

tally() { # label, then the pytest command (run with -rf)
	local label=$1
	shift
	local out
	out=$("$@" 2>&1 || true)
	keep "$label" "$out"
	printf '%-46s %s\n' "$label" "$(tail -1 <<<"$out")"
	# The tests that failed, each once, however many parameters it ran with.
	grep -E '^FAILED ' <<<"$out" | sed -E 's/^FAILED [^:]*::(.*::)?//; s/[[ ].*//' | sort | uniq -c | sed 's/^/    /' || true
}

# go test -v, one top-level test a process: a test that panics (redsync's
# helpers panic on an error reply) ends its process, so the subtests it
# did not reach run again in a process of their own. Counted: the leaves
# (the subtests, and the tests without any), as pytest counts parameters;
# listed: each failing test once, with how many of its subtests failed.
gotest_tally() { # label, the test binary
	local label=$1 bin=$2 out="" t got skip reported
	for t in $("$bin" -test.list '.*' | grep '^Test'); do
		skip=
		while :; do
			got=$("$bin" -test.v -test.timeout 10m -test.run "^$t\$" ${skip:+-test.skip "$skip"} 2>&1 || true)
			out+=$got$'\n'
			grep -q '^panic: ' <<<"$got" || break
			reported=$(grep -oE -- "--- (PASS|FAIL|SKIP): $t/[^ ]+" <<<"$out" | sed "s|.*: $t/||" |
				sed 's/[^A-Za-z0-9_-]/\\&/g' | sort -u | paste -sd'|' || true)
			[ -n "$reported" ] && [ "$skip" != "^$t\$/^($reported)\$" ] || break
			skip="^$t\$/^($reported)\$"
		done
	done
	keep "$label" "$out"
	awk -v label="$label" '
		/^ *--- (PASS|FAIL|SKIP): / {
			s = $2; sub(":", "", s); st[$3] = s
			if ($3 ~ /\//) { p = $3; sub(/\/.*/, "", p); parent[p] = 1 }
		}
		END {
			for (n in st) if (!(n in parent)) {
				c[st[n]]++
				if (st[n] == "FAIL") { p = n; sub(/\/.*/, "", p); f[p]++ }
			}
			line = sprintf("%d passed, %d failed", c["PASS"], c["FAIL"])
			if (c["SKIP"]) line = line sprintf(", %d skipped", c["SKIP"])
			printf "%-46s %s\n", label, line
			fflush()
			for (p in f) printf "    %7d %s\n", f[p], p | "sort -k2"
		}' <<<"$out"
}

# ava, its verbose reporter as the project runs it; stopped (SIGINT: it
# lists the tests it did not start) after a minute.
ava_tally() { # label, the directory of the compiled tests
	local label=$1 dir=$2 out
	out=$(cd "$dir" && timeout -s INT 60 ../../node_modules/.bin/ava --verbose '*.test.js' 2>&1 || true)
	keep "$label" "$out"
	# Their titles, to cut each failure's message off its line.
	local titles
	titles=$(grep -ohE 'test\(`\$\{namespace\} - .*`, async' "$dir"/../../single.test.ts |
		sed -E 's/^test\(`\$\{namespace\} - //; s/`, async$//; s/\\`/`/g')
	awk -v label="$label" -v titles="$titles" '
		BEGIN { nt = split(titles, t, "\n") }
		# The namespace and title a line names: the longest that it holds.
		function name(s,   i, n, best) {
			for (i = 1; i <= nt; i++) {
				n = "instance - " t[i]
				if (index(s, n) && length(n) > length(best)) best = n
				n = "cluster - " t[i]
				if (index(s, n) && length(n) > length(best)) best = n
			}
			return best
		}
		/^  ✔ / { pass++ }
		/^  ✖ .* › / { fail++; failed[name($0)] = 1 }
		/^  ◌ / { pending++; notrun[name($0)] = 1 }
		END {
			line = sprintf("%d passed, %d failed", pass, fail)
			if (pending) line = line sprintf(", %d not run", pending)
			printf "%-46s %s\n", label, line
			fflush()
			for (n in failed) printf "    %7d %s\n", 1, n | "sort -k2"
			close("sort -k2")
			for (n in notrun) printf "    %7d %s (not run)\n", 1, n | "sort -k2"
		}' <<<"$out"
}

# redsync: 48 servers, each on its port with a Unix socket beside it (the
# suite reaches most through the socket, rueidis through the port): 48
# redis-servers, or 48 lockproxy instances, each over its own database of
# the three backends, so that each is a lock service of its own as each
# redis-server is.
run_redsync() { # redis or lockproxy
	local base first i p
	base=$(free_ports $redsync_servers)
	rm -rf redsync-sockets
	mkdir redsync-sockets
	first=${#pids[@]}
	for i in $(seq 0 $((redsync_servers - 1))); do
		p=$((base + i))
		if [ "$1" = redis ]; then
			start_redis "$p" --unixsocket "$work/redsync-sockets/$p.sock"
		else
			start_proxy "$p" $((2 + i)) -unix-socket "$work/redsync-sockets/$p.sock"
		fi
	done
	for i in $(seq 0 $((redsync_servers - 1))); do
		wait_ready -s "$work/redsync-sockets/$((base + i)).sock"
	done
	(cd "$redsync" && PEER_REDSYNC_BASE_PORT=$base PEER_REDSYNC_SOCKETS=$work/redsync-sockets \
		gotest_tally "redsync v4.18.1 tests, $1" ./redsync.test)
	stop "${pids[@]:$first}"
	pids=("${pids[@]:0:$first}")
}

# node-redlock: one Redis, and one Redis Cluster of three masters; or
# lockproxy, and lockproxy in cluster mode over another database of the
# same backends (the two deployments' tests take the same keys at once).
run_node_redlock() { # redis or lockproxy, the port of the one server
	local first cluster nodes=() n p
	first=${#pids[@]}
	if [ "$1" = redis ]; then
		rm -rf node-cluster
		mkdir node-cluster
		for _ in 1 2 3; do
			p=$(free_port)
			start_redis "$p" --dir "$work/node-cluster" --cluster-enabled yes --cluster-config-file "nodes-$p.conf"
			nodes+=("127.0.0.1:$p")
		done
		for n in "${nodes[@]}"; do
			for _ in $(seq 100); do
				[ "$(redis-cli -p "${n##*:}" PING 2>/dev/null)" = PONG ] && break
				sleep 0.1
			done
		done
		redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
		cluster=${nodes[0]##*:}
	else
		cluster=$(free_port)
		start_proxy "$cluster" 1 -cluster-nodes "127.0.0.1:$cluster"
		wait_ready -p "$cluster"
	fi
	PEER_REDIS_PORT=$2 PEER_CLUSTER_PORT=$cluster ava_tally "node-redlock v5.0.0-beta.2 single, $1" "$nr/dist/esm"
	stop "${pids[@]:$first}"
	pids=("${pids[@]:0:$first}")
}

for target in "redis:$plain" "lockproxy:$proxy"; do
	name=${target%%:*}
	port=${target##*:}
	sock=$work/plain.sock
	[ "$name" = lockproxy ] && sock=$work/proxy.sock
	if want redis-py; then
		(cd redis-8.1.0 && tally "redis-py 8.1.0 lock tests, $name" \
			../venv/bin/python -m pytest -q -p no:cacheprovider -p pytest_asyncio --asyncio-mode=auto \
			tests/test_lock.py tests/test_asyncio/test_lock.py --redis-url="redis://127.0.0.1:$port/9" -rf)
	fi
	if want python-redis-lock; then
		(cd python-redis-lock-4.0.0 && PEER_SOCKET=$sock tally "python-redis-lock 4.0.0 tests, $name" \
			../venv/bin/python -m pytest -q -p no:cacheprovider tests -rf)
	fi
	if want redsync; then run_redsync "$name"; fi
	if $nr_ok; then run_node_redlock "$name" "$port"; fi
done
