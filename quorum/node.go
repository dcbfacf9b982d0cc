package quorum

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one backend master and what the engine knows of its restarts.
type node struct {
	index int
	addr  string
	pipe  *pipe
	log   *slog.Logger
	stats nodeStats

	// quarantine is off when the backends persist every write.
	quarantine time.Duration

	mu         sync.Mutex
	runID      string    // the backend process last seen
	eligibleAt time.Time // its replies count from then on (monotonic clock)
}

func newNode(index int, rawURL string, cfg Config) (*node, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("backend %d: %w", index, err)
	}
	if opt.TLSConfig != nil && cfg.TLSConfig != nil {
		tc := cfg.TLSConfig.Clone()
		if tc.ServerName == "" {
			tc.ServerName = opt.TLSConfig.ServerName
		}
		tc.InsecureSkipVerify = tc.InsecureSkipVerify || opt.TLSConfig.InsecureSkipVerify
		opt.TLSConfig = tc
	}
	n := &node{
		index: index,
		addr:  opt.Addr,
		log:   cfg.Logger.With("backend", opt.Addr),
	}
	if !cfg.DisableRestartQuarantine {
		n.quarantine = cfg.MaxTTL
	}
	n.pipe = newPipe(opt, cfg.NodeTimeout, n.hello, n.logState)
	return n, nil
}

// hello greets a new connection. A backend that restarted has closed every
// connection we had to it, so the first command to reach the new process
// comes after this: its uptime is known before any of its replies counts.
// The scripts are loaded in the same round trip, so that the first lock
// after a restart is as quick as any.
func (n *node) hello(rw *bufio.ReadWriter) error {
	var cmds []*command
	if n.quarantine > 0 {
		cmds = append(cmds, plainCommand("INFO", "server"))
	}
	for _, s := range allScripts {
		cmds = append(cmds, plainCommand("SCRIPT", "LOAD", s.src))
	}
	for _, c := range cmds {
		rw.Write(c.wire)
	}
	if err := rw.Flush(); err != nil {
		return err
	}
	for i := range cmds {
		r, err := readReply(rw.Reader)
		if err != nil {
			return err
		}
		if r.kind == '-' {
			return redisError(r.str)
		}
		if i == 0 && n.quarantine > 0 {
			if err := n.checkUptime(r.str); err != nil {
				return err
			}
		}
	}
	return nil
}

// logState logs each change of the backend's connection, once: a dead
// backend is redialled every timeout, and only the first failure is news.
func (n *node) logState(up bool, err error) {
	if up {
		n.log.Info("backend connected")
		return
	}
	n.log.Warn("backend unreachable; its votes count as failures until it answers again", "err", err)
}

// checkUptime reads the backend's own uptime so that every proxy instance,
// including one started after the backend restarted, reaches the same verdict.
func (n *node) checkUptime(info string) error {
	runID, uptime, err := parseServerInfo(info)
	if err != nil {
		return err
	}
	n.observe(runID, uptime)
	return nil
}

func (n *node) observe(runID string, uptime time.Duration) {
	// uptime_in_seconds is rounded down, so this errs towards a longer wait.
	eligibleAt := time.Now().Add(n.quarantine - uptime)
	n.mu.Lock()
	previous := n.runID
	n.runID = runID
	n.eligibleAt = eligibleAt
	n.mu.Unlock()
	if previous == runID {
		return
	}
	left := time.Until(eligibleAt)
	switch {
	case left <= 0 && previous == "":
		n.log.Info("backend counts toward quorum", "uptime", uptime)
	case left <= 0:
		n.log.Warn("backend restarted; it has been up longer than max_ttl and counts toward quorum", "uptime", uptime)
	default:
		n.log.Warn("backend quarantined: up for less than max_ttl, it may have forgotten locks; its replies count toward quorum from then on",
			"uptime", uptime, "counts_in", left.Round(time.Second), "counts_at", time.Now().Add(left).Format(time.RFC3339))
	}
}

// quarantined returns a *QuarantineError while the backend's replies must
// not count toward any quorum, and nil otherwise.
func (n *node) quarantined() error {
	if n.quarantine == 0 {
		return nil
	}
	n.mu.Lock()
	left := time.Until(n.eligibleAt)
	n.mu.Unlock()
	if left > 0 {
		return &QuarantineError{Left: left}
	}
	return nil
}

func parseServerInfo(info string) (runID string, uptime time.Duration, err error) {
	seconds := -1
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch name {
		case "run_id":
			runID = value
		case "uptime_in_seconds":
			if seconds, err = strconv.Atoi(value); err != nil {
				return "", 0, fmt.Errorf("quorum: bad uptime_in_seconds %q", value)
			}
		}
	}
	if seconds < 0 || runID == "" {
		return "", 0, fmt.Errorf("quorum: INFO server lacks run_id or uptime_in_seconds")
	}
	return runID, time.Duration(seconds) * time.Second, nil
}

// do sends cmd to the backend and waits for its reply until ctx is done.
// The command is not withdrawn then: its late reply is dropped, and the
// caller must treat its effect as unknown.
func (n *node) do(ctx context.Context, cmd *command) (reply, error) {
	w := make(waiter, 1)
	n.pipe.send(&pending{to: w, node: n.index, cmd: cmd})
	select {
	case o := <-w:
		return o.reply, o.err
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
}

// run runs a script on the backend and waits as do does.
func (n *node) run(ctx context.Context, s *script, keys []string, args ...any) (reply, error) {
	return n.do(ctx, scriptCommand(s, keys, args...))
}

type pipeOutcome struct {
	reply reply
	err   error
}

// waiter is the completer of a single request with someone waiting on it.
type waiter chan pipeOutcome

func (w waiter) complete(_ int, r reply, err error) { w <- pipeOutcome{r, err} }
