package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

func TestOutcome(t *testing.T) {
	noQuorum := &quorum.NoQuorumError{Counted: 1, Total: 3, Needed: 2}
	for _, tc := range []struct {
		op   quorum.Op
		err  error
		want Outcome
	}{
		{quorum.OpAcquire, nil, OutcomeAcquired},
		{quorum.OpAcquire, quorum.ErrNotAcquired, OutcomeHeldElsewhere},
		{quorum.OpAcquire, fmt.Errorf("wrapped: %w", quorum.ErrNotAcquired), OutcomeHeldElsewhere},
		{quorum.OpAcquire, noQuorum, OutcomeNoQuorum},
		{quorum.OpAcquire, &quorum.TTLError{TTL: time.Hour, Max: time.Minute}, OutcomeError},
		{quorum.OpAcquireOrRenew, quorum.ErrNotAcquired, OutcomeHeldElsewhere},
		{quorum.OpExtendOrAcquire, nil, OutcomeAcquired},
		{quorum.OpExtendOrAcquire, quorum.ErrNotHeld, OutcomeHeldElsewhere},
		{quorum.OpRelease, nil, OutcomeOK},
		{quorum.OpRelease, quorum.ErrNotHeld, OutcomeNotHeld},
		{quorum.OpRelease, quorum.ErrAbsent, OutcomeNotHeld},
		{quorum.OpRelease, noQuorum, OutcomeNoQuorum},
		{quorum.OpRelease, context.DeadlineExceeded, OutcomeNoQuorum},
		{quorum.OpRelease, context.Canceled, OutcomeError},
		{quorum.OpExtend, quorum.ErrNotHeld, OutcomeNotHeld},
		{quorum.OpOwnerPTTL, quorum.ErrNotHeld, OutcomeNotHeld},
		{quorum.OpGet, quorum.ErrNotFound, OutcomeOK},
		{quorum.OpPTTL, quorum.ErrNoExpiry, OutcomeOK},
		{quorum.OpDelete, nil, OutcomeOK},
		{quorum.OpExists, errors.New("boom"), OutcomeError},
	} {
		got := outcome(tc.op, tc.err)
		if got != tc.want {
			t.Errorf("%s, %v: want %s, got %s", tc.op, tc.err, tc.want, got)
		}
		if !slices.Contains(Outcomes(tc.op), got) {
			t.Errorf("%s, %v: %s is not among its Outcomes %v", tc.op, tc.err, got, Outcomes(tc.op))
		}
	}
}

// heard records what an Observer hears.
type heard struct {
	mu  sync.Mutex
	ops []string
}

func (h *heard) Operation(op quorum.Op, o Outcome, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d < 0 {
		o = OutcomeError
	}
	h.ops = append(h.ops, op.String()+" "+o.String())
}

func (h *heard) SessionRenewalLag(time.Duration) {}

func TestObserverHearsOperations(t *testing.T) {
	h := &heard{}
	ts := startServer(t, Config{Observer: h})
	w := connect(t, ts.addr)
	w.do("SET", "k", "t", "NX", "PX", "1000")
	w.do("GET", "k")
	ts.fake.reset(fails(quorum.ErrNotHeld))
	w.do("EVAL", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, "1", "k", "t")
	w.do("PING")

	h.mu.Lock()
	defer h.mu.Unlock()
	if exp, got := "[acquire acquired get ok release not_held]", fmt.Sprint(h.ops); exp != got {
		t.Fatalf("heard: want %s, got %s", exp, got)
	}
}

// nopLocker answers every lock request at once, without allocating.
type nopLocker struct{ Locker }

func (nopLocker) Lock(context.Context, quorum.Lock) (quorum.Result, error) {
	return quorum.Result{}, quorum.ErrNotAcquired
}

type nopObserver struct{}

func (nopObserver) Operation(quorum.Op, Outcome, time.Duration) {}
func (nopObserver) SessionRenewalLag(time.Duration)             {}

// TestObserveAllocatesNothing: counting and observing costs no allocation
// per lock operation.
func TestObserveAllocatesNothing(t *testing.T) {
	locks, counters := observe(nopLocker{}, nopObserver{})
	ctx := context.Background()
	req := quorum.Lock{Op: quorum.OpAcquire, Keys: []string{"k"}, Token: "t", TTL: time.Second}
	allocs := testing.AllocsPerRun(1000, func() {
		locks.Lock(ctx, req)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per operation", allocs)
	}
	if n := counters.operations[quorum.OpAcquire][OutcomeHeldElsewhere].Load(); n < 1000 {
		t.Errorf("counted %d operations", n)
	}
}
