#!/usr/bin/env bash
# redis-cli with the redis.io recipe, by the compatibility suite's contract
# (see test/compat_test.go): contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR
# | suite ADDR LOGFILE ROUNDS WORKERS.
set -euo pipefail
command=$1 addr=$2
. "$(dirname "$0")/common.sh"
extend='if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end'

contend() { # contend LOGFILE ROUNDS WORKER
	local n token
	for ((n = 0; n < $2; n++)); do
		token="$3-$n"
		until [ "$(cli SET compat:contended "$token" NX PX 10000)" = OK ]; do
			sleep "0.00$((RANDOM % 5 + 1))"
		done
		hold_and_release "$1" "$token"
	done
}

scenario() {
	key=compat:scenario
	cli DEL "$key" >/dev/null
	expect "acquire" OK "$(cli SET "$key" me NX PX 10000)"
	expect "second owner gets nil" "" "$(cli SET "$key" other PX 10000 NX)"
	expect "extend as owner" 1 "$(cli EVAL "$extend" 1 "$key" me 20000)"
	ttl=$(cli PTTL "$key")
	[ "$ttl" -gt 10000 ] || { echo "FAIL PTTL after extend: $ttl"; exit 1; }
	echo "ok   PTTL after extend ($ttl ms)"
	expect "extend by a non-owner refused" 0 "$(cli EVAL "$extend" 1 "$key" other 20000)"
	expect "release by a non-owner refused" 0 "$(cli EVAL "$release" 1 "$key" other)"
	expect "GET shows the owner" me "$(cli GET "$key")"
	sha=$(cli SCRIPT LOAD "$release")
	expect "release by EVALSHA" 1 "$(cli EVALSHA "$sha" 1 "$key" me)"
	expect "free again" OK "$(cli SET "$key" other NX PX 10000)"
	cli DEL "$key" >/dev/null
}

case $command in
contend) [ $# = 5 ] || usage; contend "$3" "$4" "$5" ;;
scenario) scenario ;;
suite) [ $# = 5 ] || usage; suite "$3" "$4" "$5" ;;
*) usage ;;
esac
