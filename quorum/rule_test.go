package quorum

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDriftAndValidity(t *testing.T) {
	e := &Engine{cfg: Config{DriftFactor: 0.01}}
	if exp, got := 102*time.Millisecond, e.drift(10*time.Second); exp != got {
		t.Errorf("drift(10s): expected %s, got %s", exp, got)
	}
	if exp, got := 10*time.Second-250*time.Millisecond-102*time.Millisecond, e.validity(10*time.Second, 250*time.Millisecond); exp != got {
		t.Errorf("validity: expected %s, got %s", exp, got)
	}
}

func TestTally(t *testing.T) {
	fail := vote[ack]{err: &NodeError{Err: context.DeadlineExceeded}}
	yes, no, absent := vote[ack]{val: ack{yes: true}}, vote[ack]{}, vote[ack]{val: ack{absent: true}}
	for _, tc := range []struct {
		name    string
		votes   []vote[ack]
		decided bool
		outcome string // ok, refused, noquorum
	}{
		{"quorum of yes stops early", []vote[ack]{yes, yes, yes}, true, "ok"},
		{"two yes of five wait", []vote[ack]{yes, yes}, false, ""},
		{"three no of five refuse at once", []vote[ack]{no, no, no}, true, "refused"},
		{"two no two failures is no quorum", []vote[ack]{no, no, fail, fail}, false, ""},
		{"two no three failures", []vote[ack]{no, no, fail, fail, fail}, true, "noquorum"},
		{"three failures wait for the rest, to name them", []vote[ack]{fail, fail, fail}, false, ""},
		// The silent backends could make the two yes a quorum: a stall is
		// not contention.
		{"two yes one no two failures", []vote[ack]{yes, yes, no, fail, fail}, true, "noquorum"},
		{"one yes two no two failures", []vote[ack]{yes, no, no, fail, fail}, true, "noquorum"},
		{"one yes three no one failure", []vote[ack]{yes, no, no, no, fail}, true, "refused"},
		{"absent on a quorum", []vote[ack]{absent, absent, no, absent}, true, "absent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := &tally{total: 5, quorum: 3}
			for _, v := range tc.votes {
				tl.add(v)
			}
			if exp, got := tc.decided, tl.decided(); exp != got {
				t.Fatalf("decided: expected %v, got %v", exp, got)
			}
			if !tc.decided {
				return
			}
			got := "ok"
			if !tl.succeeded() {
				switch err := tl.err(ErrNotHeld); {
				case errors.Is(err, ErrNoQuorum):
					got = "noquorum"
				case errors.Is(err, ErrAbsent):
					got = "absent"
				default:
					got = "refused"
				}
			}
			if got != tc.outcome {
				t.Fatalf("outcome: expected %s, got %s", tc.outcome, got)
			}
		})
	}
}
