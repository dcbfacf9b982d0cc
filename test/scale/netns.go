//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Everything the bench creates carries these names, so that a run can find
// and remove what a crashed earlier run left behind without touching
// anything else on the machine.
const (
	nsPrefix   = "lpscale-"
	vethPrefix = "lpsv-"
	bridgeName = "lpscale0"
	subnet     = "10.231.0."
	bridgeIP   = subnet + "1"
	lockPath   = "/run/lpscale.lock"
)

// host is one network namespace standing for one machine of a deployment.
type host struct {
	ns, veth, ip string
}

// network is the bridge and the hosts hanging off it. The load generator
// stays in the root namespace, where the bridge has an address, and so
// reaches every host without routes.
type network struct {
	groups  []host
	proxies []host
	lock    *os.File
}

// preflight refuses early, with the reason, what would otherwise fail
// half-way through creating namespaces.
func preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("lpscale must run as root: it creates network namespaces, veth pairs and a bridge")
	}
	for _, tool := range []string{"ip", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found in PATH (apt-get install iproute2 redis-server)", tool)
		}
	}
	return nil
}

// ipCmd runs ip(8) and returns its error with what ip said, which is the
// only useful part of a failure.
func ipCmd(args ...string) error {
	var out bytes.Buffer
	c := exec.Command("ip", args...)
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// setupNetwork takes the machine-wide lock (two runs would remove each
// other's namespaces as stale), removes leftovers of a crashed run, and
// lays out one namespace per backend group and per proxy.
func setupNetwork(groups, proxies int) (n *network, err error) {
	if groups > 80 || proxies > 100 {
		return nil, errors.New("at most 80 groups and 100 proxies fit the /24")
	}
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("another lpscale run holds %s: %w", lockPath, err)
	}
	n = &network{lock: lock}
	defer func() {
		if err != nil {
			n.teardown()
		}
	}()
	if err := removeStale(); err != nil {
		return nil, err
	}
	if err := ipCmd("link", "add", bridgeName, "type", "bridge"); err != nil {
		return nil, err
	}
	if err := ipCmd("addr", "add", bridgeIP+"/24", "dev", bridgeName); err != nil {
		return nil, err
	}
	if err := ipCmd("link", "set", bridgeName, "up"); err != nil {
		return nil, err
	}
	for g := range groups {
		h := host{ns: fmt.Sprintf("%sg%d", nsPrefix, g), veth: fmt.Sprintf("%sg%d", vethPrefix, g), ip: fmt.Sprintf("%s%d", subnet, 10+g)}
		if err := addHost(h); err != nil {
			return nil, err
		}
		n.groups = append(n.groups, h)
	}
	for p := range proxies {
		h := host{ns: fmt.Sprintf("%sp%d", nsPrefix, p), veth: fmt.Sprintf("%sp%d", vethPrefix, p), ip: fmt.Sprintf("%s%d", subnet, 100+p)}
		if err := addHost(h); err != nil {
			return nil, err
		}
		n.proxies = append(n.proxies, h)
	}
	return n, nil
}

func addHost(h host) error {
	steps := [][]string{
		{"netns", "add", h.ns},
		{"-n", h.ns, "link", "set", "lo", "up"},
		{"link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"link", "set", h.veth, "master", bridgeName},
		{"link", "set", h.veth, "up"},
		{"-n", h.ns, "addr", "add", h.ip + "/24", "dev", "eth0"},
		{"-n", h.ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	return nil
}

// teardown removes everything setupNetwork made and releases the lock.
func (n *network) teardown() {
	removeStale()
	if n.lock != nil {
		n.lock.Close()
		n.lock = nil
	}
}

// removeStale deletes every lpscale- namespace, lpsv- link and the bridge.
// Deleting a namespace destroys its end of each veth pair and with it the
// root end, but a crash between creating a pair and moving its peer leaves
// a root-side link, hence the sweep over links too.
func removeStale() error {
	var errs []error
	gone := func(err error) bool { return err != nil && strings.Contains(err.Error(), "Cannot find device") }
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("ip netns list: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], nsPrefix) {
			if err := ipCmd("netns", "del", f[0]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// The kernel destroys a deleted namespace's devices in the background,
	// so the root ends may linger a moment: poll until they are gone, or a
	// new run would find its veth names taken.
	deadline := time.Now().Add(10 * time.Second)
	for {
		names, err := ourLinks()
		if err != nil {
			return err
		}
		if len(names) == 0 {
			break
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("links still present: %v", names))
			break
		}
		for _, name := range names {
			if err := ipCmd("link", "del", name); err != nil && !gone(err) {
				errs = append(errs, err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.Join(errs...)
}

// ourLinks names the root namespace's links this bench creates.
func ourLinks() ([]string, error) {
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("ip link show: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(links), "\n") {
		f := strings.Fields(line) // "12: lpsv-g0@if2: <...>"
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, vethPrefix) || name == bridgeName {
			names = append(names, name)
		}
	}
	return names, nil
}
