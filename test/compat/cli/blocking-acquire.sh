#!/usr/bin/env bash
# redis-cli with lockproxy's blocking acquire (LOCK.ACQUIRE ... WAIT), by the
# compatibility suite's contract (see test/compat_test.go):
# contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR.
set -euo pipefail
command=$1 addr=$2
. "$(dirname "$0")/common.sh"

case $command in
contend)
	log=$3 rounds=$4 worker=$5
	for ((n = 0; n < rounds; n++)); do
		token="$worker-$n"
		# No pause between tries: each one waits in the proxy until the
		# lock is released (or 20 s pass, and it waits again).
		until [ "$(cli LOCK.ACQUIRE compat:contended "$token" PX 10000 WAIT 20000)" = OK ]; do :; done
		hold_and_release "$log" "$token"
	done
	;;
scenario)
	key=compat:scenario
	cli DEL "$key" >/dev/null
	expect "acquire, free" OK "$(cli LOCK.ACQUIRE "$key" me PX 10000 WAIT 1000)"
	expect "another waits out its 200 ms" "" "$(cli LOCK.ACQUIRE "$key" other PX 10000 WAIT 200)"
	expect "release" 1 "$(cli EVAL "$release" 1 "$key" me)"
	expect "another takes it" OK "$(cli LOCK.ACQUIRE "$key" other PX 10000 WAIT 200)"
	expect "release by its holder" 1 "$(cli EVAL "$release" 1 "$key" other)"
	;;
*)
	echo "usage: $0 contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR" >&2
	exit 2
	;;
esac
