//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	locks, conns, workers, rounds, proxies, heldGroups int
	duration, backendTimeout                           time.Duration
	groupCounts                                        []int
	jsonPath, proxyBin                                 string
}

// results is everything measured; -json writes it as is.
type results struct {
	CPUs       int                `json:"cpus"`
	Proxies    int                `json:"proxies"`
	Held       *heldResult        `json:"held_locks,omitempty"`
	Conns      *connResult        `json:"connections,omitempty"`
	Throughput []throughputResult `json:"throughput"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lpscale:", err)
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string, out io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&o.locks, "locks", 100_000, "distinct locks to acquire and hold for the memory figures")
	fs.IntVar(&o.conns, "conns", 10_000, "idle client connections to open for the memory figures")
	fs.IntVar(&o.heldGroups, "held-groups", 3, "shard groups during the held-locks and connections measurements")
	groups := fs.String("group-counts", "1,2,3", "shard group counts to measure throughput with, comma-separated")
	fs.IntVar(&o.workers, "workers", 64, "closed-loop workers of the throughput rounds")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of one throughput round")
	fs.IntVar(&o.rounds, "rounds", 3, "throughput rounds per group count; the median is reported")
	fs.IntVar(&o.proxies, "proxies", 2, "proxy processes, each in its own namespace")
	fs.DurationVar(&o.backendTimeout, "backend-timeout", 500*time.Millisecond,
		"the proxies' -backend-timeout: the default 50ms trips on a 2-core machine run flat out")
	fs.StringVar(&o.jsonPath, "json", "", "also write every figure to this file as JSON")
	fs.StringVar(&o.proxyBin, "proxy-bin", "", "lockproxy binary; empty: build it from this module")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, s := range strings.Split(*groups, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || k < 1 {
			return nil, fmt.Errorf("-group-counts: %q is not a group count", s)
		}
		o.groupCounts = append(o.groupCounts, k)
	}
	if o.locks < 0 || o.conns < 0 || o.workers < 1 || o.rounds < 1 || o.proxies < 1 || o.heldGroups < 1 || o.duration <= 0 {
		return nil, errors.New("-workers, -rounds, -proxies, -held-groups and -duration must be positive; -locks and -conns not negative")
	}
	return o, nil
}

// run is the whole command, callable in-process by the test; the network
// and every server are gone when it returns, whatever the outcome.
func run(ctx context.Context, args []string, out io.Writer) (*results, error) {
	o, err := parseFlags(args, out)
	if err != nil {
		return nil, err
	}
	if err := preflight(); err != nil {
		return nil, err
	}
	if err := raiseNoFile(uint64(2*o.conns+8192), uint64(o.conns+1024)); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "lpscale-bin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if o.proxyBin == "" {
		if o.proxyBin, err = buildProxy(ctx, tmp); err != nil {
			return nil, err
		}
	} else if o.proxyBin, err = filepath.Abs(o.proxyBin); err != nil {
		return nil, err
	}
	maxGroups := o.heldGroups
	for _, k := range o.groupCounts {
		maxGroups = max(maxGroups, k)
	}
	n, err := setupNetwork(maxGroups, o.proxies)
	if err != nil {
		return nil, err
	}
	defer n.teardown()

	res := &results{CPUs: runtime.NumCPU(), Proxies: o.proxies}
	if o.locks > 0 || o.conns > 0 {
		if err := measureMemory(ctx, n, o, res, out); err != nil {
			return res, err
		}
	}
	for _, k := range o.groupCounts {
		t, err := measureThroughput(ctx, n, o, k)
		if err != nil {
			return res, fmt.Errorf("throughput with %d groups: %w", k, err)
		}
		res.Throughput = append(res.Throughput, *t)
	}
	printThroughput(out, o, res.Throughput)
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return res, err
		}
		if err := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); err != nil {
			return res, err
		}
	}
	return res, nil
}

// measureMemory runs the held-locks and connections measurements on one
// fleet: neither disturbs the other's figures, since the locks live in the
// backends and the connections are closed before returning.
func measureMemory(ctx context.Context, n *network, o *options, res *results, out io.Writer) error {
	f, err := startFleet(ctx, n, o, o.heldGroups)
	if err != nil {
		return err
	}
	defer f.stop()
	if o.locks > 0 {
		if res.Held, err = measureHeld(ctx, f, o); err != nil {
			return fmt.Errorf("held locks: %w", err)
		}
		printHeld(out, res.Held)
	}
	if o.conns > 0 {
		if res.Conns, err = measureConns(ctx, f, o); err != nil {
			return fmt.Errorf("connections: %w", err)
		}
		printConns(out, res.Conns)
	}
	return nil
}

// buildProxy builds lockproxy from the module root, found with go env GOMOD
// so that the command runs from any directory of the module.
func buildProxy(ctx context.Context, dir string) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(gomod))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the lockproxy module: run from the repository or pass -proxy-bin")
	}
	bin := filepath.Join(dir, "lockproxy")
	c := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	c.Dir = filepath.Dir(mod)
	if out, err := c.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build lockproxy: %w\n%s", err, out)
	}
	return bin, nil
}
