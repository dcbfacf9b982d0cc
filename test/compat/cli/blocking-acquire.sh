#!/usr/bin/env bash
# redis-cli with lockproxy's blocking acquire (LOCK.ACQUIRE ... WAIT), by the
# compatibility suite's contract (see test/compat_test.go):
# contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS.
set -euo pipefail
command=$1 addr=$2
. "$(dirname "$0")/common.sh"

contend() { # contend LOGFILE ROUNDS WORKER
	local n token
	for ((n = 0; n < $2; n++)); do
		token="$3-$n"
		# No pause between tries: each one waits in the proxy until the
		# lock is released (or 20 s pass, and it waits again).
		until [ "$(cli LOCK.ACQUIRE compat:contended "$token" PX 10000 WAIT 20000)" = OK ]; do :; done
		hold_and_release "$1" "$token"
	done
}

scenario() {
	key=compat:scenario
	cli DEL "$key" >/dev/null
	expect "acquire, free" OK "$(cli LOCK.ACQUIRE "$key" me PX 10000 WAIT 1000)"
	expect "another waits out its 200 ms" "" "$(cli LOCK.ACQUIRE "$key" other PX 10000 WAIT 200)"
	expect "release" 1 "$(cli EVAL "$release" 1 "$key" me)"
	expect "another takes it" OK "$(cli LOCK.ACQUIRE "$key" other PX 10000 WAIT 200)"
	expect "release by its holder" 1 "$(cli EVAL "$release" 1 "$key" other)"
}

case $command in
contend) [ $# = 5 ] || usage; contend "$3" "$4" "$5" ;;
scenario) scenario ;;
suite) [ $# = 5 ] || usage; suite "$3" "$4" "$5" ;;
*) usage ;;
esac
