//go:build linux

// Command scale measures what grows when a lockproxy deployment grows: the
// memory a held lock costs the proxies (none expected: they keep no lock
// state) and the backends, the memory an idle client connection costs a
// proxy, and what one lock cycle costs each component as shard groups are
// added. Every group and every proxy runs in a network namespace of its
// own, joined by a bridge, so that connections cross a real network stack
// and each server binds the address a separate host would have.
//
// Run as root from the repository:
//
//	go run ./test/scale                        # 100k locks, 10k connections, groups 1,2,3
//	go run ./test/scale -locks 2000 -conns 200 -group-counts 1,2 -rounds 1 -duration 1s
//	go run ./test/scale -json /tmp/scale.json  # every figure, as JSON
//
// The namespaces (lpscale-*), their veth pairs (lpsv-*) and the bridge
// lpscale0 on 10.231.0.0/24 are removed at exit, on error or SIGINT, and
// at the start of the next run if a crash left them; /run/lpscale.lock
// keeps two runs from removing each other's.
//
// Files: main.go (flags, the run and its results), netns.go (namespaces,
// veth pairs and the bridge), procs.go (the redis-servers and proxies it
// starts and stops), measure.go (the measurements), report.go (the
// printed tables).
//
// It builds on Linux alone: network namespaces, veth pairs and /proc are
// what it measures with.
package main
