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
	"github.com/redis/go-redis/v9/maintnotifications"
)

// node is one backend master and what the engine knows of its restarts.
type node struct {
	index  int
	addr   string
	client *redis.Client
	pipe   *redis.AutoPipeliner
	log    *slog.Logger

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
	// A lost reply to a retried SET NX would read as "held elsewhere" while we
	// hold the key, so no command is ever retried behind our back.
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout = cfg.NodeTimeout
	// A pipelined batch runs under the connection's deadlines, not its
	// callers' (see node.run): a hung backend fails the batch after these,
	// and Close waits for no longer.
	opt.ReadTimeout = 2 * cfg.NodeTimeout
	opt.WriteTimeout = 2 * cfg.NodeTimeout
	// A dial retry could not finish inside one node timeout anyway.
	opt.DialerRetries = 1
	// Each new connection costs one round trip (INFO, below) and nothing more.
	opt.Protocol = 2
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

	n := &node{
		index: index,
		addr:  opt.Addr,
		log:   cfg.Logger.With("backend", opt.Addr),
	}
	if !cfg.DisableRestartQuarantine {
		n.quarantine = cfg.MaxTTL
		// A backend that restarted has closed every connection we had to it,
		// so the first command to reach the new process comes through here:
		// its uptime is known before any of its replies is counted.
		opt.OnConnect = n.checkUptime
	}
	n.client = redis.NewClient(opt)
	// Lock commands share their writes and reads: the operations in flight
	// travel to a backend in one batch instead of one round trip each.
	pipe, err := n.client.AutoPipelineWithOptions(&redis.AutoPipelineOptions{MaxBatchSize: 256, MaxConcurrentBatches: 1})
	if err != nil {
		n.client.Close()
		return nil, fmt.Errorf("backend %d: %w", index, err)
	}
	n.pipe = pipe
	return n, nil
}

// checkUptime reads the backend's own uptime so that every proxy instance,
// including one started after the backend restarted, reaches the same verdict.
func (n *node) checkUptime(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
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

// run runs a lock script on the backend through its auto-pipeline. A
// pipelined command does not honour its caller's context once queued, so the
// caller stops waiting at ctx's deadline on its own; the command's late
// answer is then dropped, and the vote counts as no answer.
func (n *node) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	done := make(chan *redis.Cmd, 1)
	go func() { done <- script.Run(ctx, n.pipe, keys, args...) }()
	select {
	case cmd := <-done:
		return cmd
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}
