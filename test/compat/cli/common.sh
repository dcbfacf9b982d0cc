# What the redis-cli compatibility programs share: sourced after
# command=$1 addr=$2 are set.
host=${addr%:*} port=${addr##*:}
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
