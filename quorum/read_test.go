package quorum

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestReads(t *testing.T) {
	c := newCluster(t, 5, Config{DisableRestartQuarantine: true})
	type holding struct {
		value string
		ttl   time.Duration // 0: no expiry
	}
	for _, tc := range []struct {
		name     string
		backends []holding // what each of the 5 backends holds ("" absent)
		get      string    // "" for ErrNotFound
		exists   bool
		pttl     time.Duration // 0 for ErrNotFound, -1 for ErrNoExpiry; else approximate
	}{
		{"absent", []holding{{}, {}, {}, {}, {}}, "", false, 0},
		{"everywhere", []holding{{"a", 10 * time.Second}, {"a", 10 * time.Second}, {"a", 10 * time.Second}, {"a", 10 * time.Second}, {"a", 10 * time.Second}}, "a", true, 10 * time.Second},
		{"on a bare quorum", []holding{{"a", 10 * time.Second}, {"a", 10 * time.Second}, {"a", 10 * time.Second}, {}, {}}, "a", true, 10 * time.Second},
		{"on a minority", []holding{{"a", 10 * time.Second}, {"a", 10 * time.Second}, {}, {}, {}}, "", false, 0},
		{"split values exist but nobody holds", []holding{{"a", 10 * time.Second}, {"a", 10 * time.Second}, {"b", 10 * time.Second}, {}, {}}, "", true, 0},
		{"quorum-th longest ttl counts", []holding{{"a", 40 * time.Second}, {"a", 30 * time.Second}, {"a", 20 * time.Second}, {"a", 5 * time.Second}, {}}, "a", true, 20 * time.Second},
		{"no expiry", []holding{{"a", 0}, {"a", 0}, {"a", 0}, {}, {}}, "a", true, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			for i, h := range tc.backends {
				if h.value != "" {
					c.direct[i].Set(t.Context(), key, h.value, h.ttl)
				}
			}
			got, err := c.engine.get(t.Context(), key)
			if tc.get == "" && !errors.Is(err, ErrNotFound) || tc.get != "" && (err != nil || got != tc.get) {
				t.Errorf("Get: expected %q, got %q, %v", tc.get, got, err)
			}
			exists, err := c.engine.exists(t.Context(), key)
			if err != nil || exists != tc.exists {
				t.Errorf("Exists: expected %v, got %v, %v", tc.exists, exists, err)
			}
			pttl, err := c.engine.pttl(t.Context(), key)
			switch {
			case tc.pttl == 0:
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("PTTL: expected ErrNotFound, got %s, %v", pttl, err)
				}
			case tc.pttl == -1:
				if !errors.Is(err, ErrNoExpiry) {
					t.Errorf("PTTL: expected ErrNoExpiry, got %s, %v", pttl, err)
				}
			default:
				// Less the drift allowance and the time spent getting here.
				if err != nil || pttl > tc.pttl-c.engine.drift(tc.pttl)+time.Millisecond || pttl < tc.pttl-2*time.Second {
					t.Errorf("PTTL: expected about %s, got %s, %v", tc.pttl, pttl, err)
				}
			}
		})
	}
}

func TestReadsMajorityDown(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	c.servers[0].Kill()
	c.servers[2].Kill()
	key := uniqueKey(t)
	if _, err := c.engine.get(t.Context(), key); !errors.Is(err, ErrNoQuorum) {
		t.Errorf("Get: expected ErrNoQuorum, got %v", err)
	}
	if _, err := c.engine.pttl(t.Context(), key); !errors.Is(err, ErrNoQuorum) {
		t.Errorf("PTTL: expected ErrNoQuorum, got %v", err)
	}
	if _, err := c.engine.exists(t.Context(), key); !errors.Is(err, ErrNoQuorum) {
		t.Errorf("Exists: expected ErrNoQuorum, got %v", err)
	}
	if _, err := c.engine.del(t.Context(), key); !errors.Is(err, ErrNoQuorum) {
		t.Errorf("Delete: expected ErrNoQuorum, got %v", err)
	}
}

// TestQuorumTTLDecidable: the quorum-th longest TTL among the holders that
// answered is a floor (the silent ones can only hold the value longer), so
// it is the answer while time is left; "expired" only when the silent
// backends could not make a quorum of holders with time left.
func TestQuorumTTLDecidable(t *testing.T) {
	e := &Engine{cfg: Config{DriftFactor: 0.01}, quorum: 2, nodes: make([]*node, 3)}
	const forever = time.Duration(math.MaxInt64)
	silent := []*NodeError{{Err: errNoReply}}
	for _, tc := range []struct {
		name      string
		ttls      []time.Duration // of the holders that answered
		silent    int
		want      time.Duration // 0: expired (ErrNotFound); -1: ErrNoExpiry
		undecided bool
	}{
		{"all answered", []time.Duration{10 * time.Second, 8 * time.Second}, 0, 8 * time.Second, false},
		{"a floor with one silent", []time.Duration{10 * time.Second, 8 * time.Second}, 1, 8 * time.Second, false},
		{"one silent could hold it longer", []time.Duration{forever, 5 * time.Second}, 1, 5 * time.Second, false},
		{"expired everywhere that answered", []time.Duration{time.Millisecond, time.Millisecond}, 1, 0, false},
		{"expired on one, the silent one decides", []time.Duration{10 * time.Second, time.Millisecond}, 1, 0, true},
		{"expired on one, all answered", []time.Duration{10 * time.Second, time.Millisecond}, 0, 0, false},
		{"no expiry on a quorum", []time.Duration{forever, forever}, 1, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var holders []keyState
			for _, ttl := range tc.ttls {
				holders = append(holders, keyState{exists: true, hasValue: true, value: "v", pttl: ttl})
			}
			got, err := e.quorumTTL(views{ctx: t.Context(), states: holders, failures: silent[:tc.silent]}, holders)
			switch {
			case tc.undecided:
				if !errors.Is(err, ErrNoQuorum) {
					t.Fatalf("expected no quorum, got %s, %v", got, err)
				}
			case tc.want == 0:
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("expected ErrNotFound, got %s, %v", got, err)
				}
			case tc.want == -1:
				if !errors.Is(err, ErrNoExpiry) {
					t.Fatalf("expected ErrNoExpiry, got %s, %v", got, err)
				}
			default:
				if exp := tc.want - e.drift(tc.want); err != nil || got != exp {
					t.Fatalf("expected %s, got %s, %v", exp, got, err)
				}
			}
		})
	}
}

func TestOwnerPTTL(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if _, err := c.engine.ownerPTTL(t.Context(), key, "owner"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("absent key: expected ErrNotHeld, got %v", err)
	}
	if _, err := c.engine.acquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	left, err := c.engine.ownerPTTL(t.Context(), key, "owner")
	if err != nil || left > 10*time.Second-c.engine.drift(10*time.Second) || left < 8*time.Second {
		t.Fatalf("owner: expected a little under 10s, got %s, %v", left, err)
	}
	if _, err := c.engine.ownerPTTL(t.Context(), key, "intruder"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("another token: expected ErrNotHeld, got %v", err)
	}
}
