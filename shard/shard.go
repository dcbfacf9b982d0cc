// Package shard spreads locks over several groups of backends, each its
// own Redlock engine, by Redis Cluster's hash slot of the key: group i of K
// serves the slots from i×16384/K to (i+1)×16384/K − 1. One group tops out
// near one Redis's throughput, since every acquisition touches every
// backend of its group; K groups share the keys, and each keeps its own
// quorum, quarantine and backend set. Keys that share a hash tag
// ({order}:a, {order}:b) share a slot, so a group: an operation on several
// keys is served when they all fall in one group, and refused with
// hashslot.ErrCrossSlot otherwise.
package shard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/lockproxy/lockproxy/internal/hashslot"
	"github.com/lockproxy/lockproxy/quorum"
)

// Groups routes each request to the engine of its keys' group.
type Groups struct {
	engines []*quorum.Engine
}

// New returns the groups served by engines, in slot order.
func New(engines []*quorum.Engine) (*Groups, error) {
	if len(engines) == 0 || len(engines) > hashslot.Count {
		return nil, fmt.Errorf("shard: %d groups: want 1 to %d", len(engines), hashslot.Count)
	}
	return &Groups{engines: engines}, nil
}

// Range is the slots group i of n serves, first and last.
func Range(i, n int) (first, last int) {
	return i * hashslot.Count / n, (i+1)*hashslot.Count/n - 1
}

// Engines are the groups' engines, in slot order.
func (g *Groups) Engines() []*quorum.Engine { return g.engines }

// Of is the group of key.
func (g *Groups) Of(key string) int {
	return hashslot.Of(key) * len(g.engines) / hashslot.Count
}

// of is the engine of keys, which must all be in one group.
func (g *Groups) of(keys ...string) (*quorum.Engine, error) {
	if len(keys) == 0 {
		return g.engines[0], nil // the engine's own OpError answers
	}
	i := g.Of(keys[0])
	for _, k := range keys[1:] {
		if g.Of(k) != i {
			return nil, hashslot.ErrCrossSlot
		}
	}
	return g.engines[i], nil
}

func (g *Groups) Lock(ctx context.Context, req quorum.Lock) (quorum.Result, error) {
	e, err := g.of(req.Keys...)
	if err != nil {
		return quorum.Result{}, err
	}
	return e.Lock(ctx, req)
}

func (g *Groups) Unlock(ctx context.Context, req quorum.Unlock) (quorum.Result, error) {
	keys := req.Keys
	if req.Latch != "" && len(keys) > 0 {
		// The latch is written beside the lock, on the same backends.
		keys = append(keys[:len(keys):len(keys)], req.Latch)
	}
	e, err := g.of(keys...)
	if err != nil {
		return quorum.Result{}, err
	}
	return e.Unlock(ctx, req)
}

func (g *Groups) Read(ctx context.Context, req quorum.Read) (quorum.Reading, error) {
	return g.engines[g.Of(req.Key)].Read(ctx, req)
}

func (g *Groups) Write(ctx context.Context, req quorum.Write) (bool, error) {
	return g.engines[g.Of(req.Key)].Write(ctx, req)
}

// Renew renews each lock in its group, the groups at once, and returns the
// outcomes in the order of req.Locks: the engine's, whose Renew says what
// each may be.
func (g *Groups) Renew(ctx context.Context, req quorum.Renewal) []quorum.Renewed {
	if len(g.engines) == 1 {
		return g.engines[0].Renew(ctx, req)
	}
	positions := make([][]int, len(g.engines)) // in req.Locks, by group
	for i, l := range req.Locks {
		group := g.Of(l.Key)
		positions[group] = append(positions[group], i)
	}
	out := make([]quorum.Renewed, len(req.Locks))
	var wg sync.WaitGroup
	for group, at := range positions {
		if len(at) == 0 {
			continue
		}
		wg.Go(func() {
			sub := req
			sub.Locks = make([]quorum.Held, len(at))
			for j, i := range at {
				sub.Locks[j] = req.Locks[i]
			}
			for j, r := range g.engines[group].Renew(ctx, sub) {
				out[at[j]] = r
			}
		})
	}
	wg.Wait()
	return out
}

// MaxTTL is every group's: they share one configuration.
func (g *Groups) MaxTTL() time.Duration { return g.engines[0].MaxTTL() }

// Quorum is the smallest group's: with one group, its quorum.
func (g *Groups) Quorum() int {
	q := g.engines[0].Quorum()
	for _, e := range g.engines[1:] {
		q = min(q, e.Quorum())
	}
	return q
}

// BackendSet names each group's backend set, comma-separated.
func (g *Groups) BackendSet() string {
	sets := make([]string, len(g.engines))
	for i, e := range g.engines {
		sets[i] = e.BackendSet()
	}
	return strings.Join(sets, ",")
}

// Backends is every group's backends, group after group, as the engines
// know them now.
func (g *Groups) Backends() []quorum.BackendState {
	var out []quorum.BackendState
	for _, e := range g.engines {
		out = append(out, e.Backends()...)
	}
	return out
}

// GroupState is one group as its engine knows it now.
type GroupState struct {
	FirstSlot, LastSlot int // the hash slots it serves (Range)
	Quorum              int
	QuorumAvailable     bool
	BackendSet          string
	Backends            []quorum.BackendState // in configuration order
}

// States reports every group, in slot order, from what the engines know
// already: nothing waits on a backend.
func (g *Groups) States() []GroupState {
	out := make([]GroupState, len(g.engines))
	for i, e := range g.engines {
		first, last := Range(i, len(g.engines))
		out[i] = GroupState{FirstSlot: first, LastSlot: last, Quorum: e.Quorum(), QuorumAvailable: e.QuorumAvailable(),
			BackendSet: e.BackendSet(), Backends: e.Backends()}
	}
	return out
}

// List pages through the groups in turn, each listed as its engine lists
// it. The cursor is the engine's times the number of groups, plus the
// group's index.
func (g *Groups) List(ctx context.Context, req quorum.List) (quorum.Listing, error) {
	n := uint64(len(g.engines))
	i, cursor := req.Cursor%n, req.Cursor/n
	req.Cursor = cursor
	out, err := g.engines[i].List(ctx, req)
	if err != nil {
		return out, err
	}
	switch {
	case out.Cursor == 0 && i+1 == n:
	case out.Cursor == 0:
		out.Cursor = i + 1 // the next group, from its start
	case out.Cursor > (^uint64(0)-i)/n:
		return quorum.Listing{}, quorum.ErrListCursor
	default:
		out.Cursor = out.Cursor*n + i
	}
	return out, nil
}

// Releases hears the releases of every group.
func (g *Groups) Releases(pattern string, fn func(key, token string)) (stop func()) {
	stops := make([]func(), len(g.engines))
	var wg sync.WaitGroup
	for i, e := range g.engines {
		wg.Go(func() { stops[i] = e.Releases(pattern, fn) })
	}
	wg.Wait()
	return all(stops)
}

// Relay sends through the group of topic's slot, where every proxy of the
// deployment hears it (Relayed).
func (g *Groups) Relay(ctx context.Context, topic, message string) error {
	return g.engines[g.Of(topic)].Relay(ctx, topic, message)
}

// Relayed hears what is relayed through every group.
func (g *Groups) Relayed(pattern string, fn func(topic, message string)) (stop func()) {
	stops := make([]func(), len(g.engines))
	for i, e := range g.engines {
		stops[i] = e.Relayed(pattern, fn)
	}
	return all(stops)
}

func all(stops []func()) func() {
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// Fences adds up the groups' fencing counts.
func (g *Groups) Fences() quorum.FenceStats {
	var sum quorum.FenceStats
	for _, e := range g.engines {
		f := e.Fences()
		sum.Minted += f.Minted
		sum.WriteBacks += f.WriteBacks
		sum.Reseeds += f.Reseeds
	}
	return sum
}

// TopUps adds up the groups' top-up counts.
func (g *Groups) TopUps() quorum.TopUpStats {
	var sum quorum.TopUpStats
	for _, e := range g.engines {
		u := e.TopUps()
		sum.Started += u.Started
		sum.Copies += u.Copies
		sum.Running += u.Running
	}
	return sum
}

// Splits adds up the groups' counts of split acquisitions tried again.
func (g *Groups) Splits() quorum.SplitStats {
	var sum quorum.SplitStats
	for _, e := range g.engines {
		u := e.Splits()
		sum.Retried += u.Retried
		sum.Granted += u.Granted
	}
	return sum
}

// Waits adds up the groups' waiting counts.
func (g *Groups) Waits() quorum.WaitStats {
	var sum quorum.WaitStats
	for _, e := range g.engines {
		w := e.Waits()
		sum.Waiting += w.Waiting
		sum.Grants += w.Grants
		sum.Timeouts += w.Timeouts
		sum.Gone += w.Gone
		sum.WakeUps += w.WakeUps
		sum.Notices += w.Notices
		sum.Releases += w.Releases
	}
	return sum
}

// QuorumAvailable reports whether every group can decide.
func (g *Groups) QuorumAvailable() bool {
	for _, e := range g.engines {
		if !e.QuorumAvailable() {
			return false
		}
	}
	return true
}

// Close closes every group's engine.
func (g *Groups) Close() error {
	var errs error
	for _, e := range g.engines {
		if err := e.Close(); err != nil {
			errs = multierror.Append(errs, err)
		}
	}
	return errs
}
