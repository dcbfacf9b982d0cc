package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// unlockRecorder keeps the last Unlock it was asked.
type unlockRecorder struct {
	Locker
	got quorum.Unlock
}

func (r *unlockRecorder) Unlock(_ context.Context, req quorum.Unlock) (quorum.Result, error) {
	r.got = req
	return quorum.Result{}, nil
}

// TestKeyspaceLatch: a hash lock release's latch is a key the backends
// write, so it goes under the user's prefix with the lock, and a latch
// longer than max_key_bytes is refused; no latch stays none.
func TestKeyspaceLatch(t *testing.T) {
	rec := &unlockRecorder{}
	k := &keyspace{locks: rec, prefix: "u:", maxKey: 16, maxToken: 16}
	req := quorum.Unlock{Op: quorum.OpHashRelease, Keys: []string{"lock"}, Token: "uuid:1", TTL: time.Second, Latch: "latch:1", LatchTTL: time.Second}
	if _, err := k.Unlock(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if exp, got := "u:lock u:latch:1", rec.got.Keys[0]+" "+rec.got.Latch; exp != got {
		t.Errorf("the engine was asked for %q, want %q", got, exp)
	}
	req.Latch = ""
	if _, err := k.Unlock(t.Context(), req); err != nil || rec.got.Latch != "" {
		t.Errorf("no latch: %v, latch %q; want none", err, rec.got.Latch)
	}
	req.Latch = "a latch of more than sixteen bytes"
	rec.got = quorum.Unlock{}
	if _, err := k.Unlock(t.Context(), req); err == nil || rec.got.Op != 0 || rec.got.Keys != nil {
		t.Errorf("a latch over max_key_bytes: %v, engine asked %+v; want refused unsent", err, rec.got)
	}
}
