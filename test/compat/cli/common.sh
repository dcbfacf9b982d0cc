# What the redis-cli compatibility programs share: sourced after
# command=$1 addr=$2 are set. Each program defines contend LOGFILE ROUNDS
# WORKER and scenario, which talk to the address that at chose.
at() { host=${1%:*} port=${1##*:}; }
at "${addr%%,*}"
cli() { redis-cli -h "$host" -p "$port" "$@"; }
release='if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end'

expect() { # expect WHAT WANT GOT
	if [ "$2" != "$3" ]; then
		echo "FAIL $1: expected '$2', got '$3'"
		exit 1
	fi
	echo "ok   $1"
}

hold_and_release() { # hold_and_release LOGFILE TOKEN: the contended lock, held
	# One write per line, O_APPEND: the holders' log proves exclusion.
	printf 'enter %s\n' "$2" >>"$1"
	printf 'exit %s\n' "$2" >>"$1"
	local got
	got=$(cli EVAL "$release" 1 compat:contended "$2")
	[ "$got" = 1 ] || { echo "release of $2 replied '$got', expected 1"; exit 1; }
}

suite() { # suite LOGFILE ROUNDS WORKERS: the contract's suite
	# The workers are subshells, forks of this shell (bash has no threads),
	# worker W at the (W mod n)th of addr's comma-separated addresses. Each
	# redis-cli is a process anyway: the fork saves only bash's start. The
	# scenario runs whatever the workers did, so that one run reports both.
	local addrs pids=() failed=0 w
	IFS=, read -ra addrs <<<"$addr"
	for ((w = 0; w < $3; w++)); do
		(at "${addrs[w % ${#addrs[@]}]}"; contend "$1" "$2" "$w") &
		pids+=($!)
	done
	for w in "${!pids[@]}"; do
		wait "${pids[w]}" || { echo "FAIL worker $w" >&2; failed=$((failed + 1)); }
	done
	at "${addrs[0]}"
	scenario
	[ "$failed" = 0 ] || { echo "$failed of $3 workers failed" >&2; exit 1; }
}

usage() {
	echo "usage: $0 contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS" >&2
	exit 2
}
