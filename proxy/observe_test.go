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
		op   Op
		err  error
		want Outcome
	}{
		{OpAcquire, nil, OutcomeAcquired},
		{OpAcquire, quorum.ErrNotAcquired, OutcomeHeldElsewhere},
		{OpAcquire, fmt.Errorf("wrapped: %w", quorum.ErrNotAcquired), OutcomeHeldElsewhere},
		{OpAcquire, noQuorum, OutcomeNoQuorum},
		{OpAcquire, &quorum.TTLError{TTL: time.Hour, Max: time.Minute}, OutcomeError},
		{OpAcquireOrRenew, quorum.ErrNotAcquired, OutcomeHeldElsewhere},
		{OpExtendOrAcquire, nil, OutcomeAcquired},
		{OpExtendOrAcquire, quorum.ErrNotHeld, OutcomeHeldElsewhere},
		{OpRelease, nil, OutcomeOK},
		{OpRelease, quorum.ErrNotHeld, OutcomeNotHeld},
		{OpRelease, quorum.ErrAbsent, OutcomeNotHeld},
		{OpRelease, noQuorum, OutcomeNoQuorum},
		{OpRelease, context.DeadlineExceeded, OutcomeNoQuorum},
		{OpRelease, context.Canceled, OutcomeError},
		{OpExtend, quorum.ErrNotHeld, OutcomeNotHeld},
		{OpOwnerPTTL, quorum.ErrNotHeld, OutcomeNotHeld},
		{OpGet, quorum.ErrNotFound, OutcomeOK},
		{OpPTTL, quorum.ErrNoExpiry, OutcomeOK},
		{OpDelete, nil, OutcomeOK},
		{OpExists, errors.New("boom"), OutcomeError},
	} {
		got := outcome(tc.op, tc.err)
		if got != tc.want {
			t.Errorf("%s, %v: want %s, got %s", tc.op, tc.err, tc.want, got)
		}
		if !slices.Contains(tc.op.Outcomes(), got) {
			t.Errorf("%s, %v: %s is not among its Outcomes %v", tc.op, tc.err, got, tc.op.Outcomes())
		}
	}
	for op := range Op(NumOps) {
		if op.String() == "" {
			t.Errorf("Op %d has no name", op)
		}
	}
}

// heard records what an Observer hears.
type heard struct {
	mu  sync.Mutex
	ops []string
}

func (h *heard) Operation(op Op, o Outcome, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d < 0 {
		o = OutcomeError
	}
	h.ops = append(h.ops, op.String()+" "+o.String())
}

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

// nopLocker answers every call at once, without allocating.
type nopLocker struct{ Locker }

func (nopLocker) Acquire(context.Context, string, string, time.Duration) (quorum.Result, error) {
	return quorum.Result{}, quorum.ErrNotAcquired
}

type nopObserver struct{}

func (nopObserver) Operation(Op, Outcome, time.Duration) {}

// TestObserveAllocatesNothing: counting and observing costs no allocation
// per lock operation.
func TestObserveAllocatesNothing(t *testing.T) {
	locks, counters := observe(nopLocker{}, nopObserver{})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		locks.Acquire(ctx, "k", "t", time.Second)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per operation", allocs)
	}
	if n := counters.operations[OpAcquire][OutcomeHeldElsewhere].Load(); n < 1000 {
		t.Errorf("counted %d operations", n)
	}
}
