package quorum

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

func TestDeleteAndExpire(t *testing.T) {
	c := newCluster(t, 3, Config{DisableRestartQuarantine: true})
	key := uniqueKey(t)
	if deleted, err := c.engine.del(t.Context(), key); err != nil || deleted {
		t.Fatalf("Delete of an absent key: %v, %v", deleted, err)
	}
	if _, err := c.engine.acquire(t.Context(), key, "owner", 10*time.Second); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if ok, err := c.engine.expire(t.Context(), key, 40*time.Second); err != nil || !ok {
		t.Fatalf("Expire: %v, %v", ok, err)
	}
	redistest.Eventually(t, func() string { return c.ttlOnQuorum(t, key, 30*time.Second) })
	if _, err := c.engine.expire(t.Context(), key, 2*time.Minute); err == nil {
		t.Fatal("Expire accepted a TTL above max_ttl")
	}
	if deleted, err := c.engine.del(t.Context(), key); err != nil || !deleted {
		t.Fatalf("Delete: %v, %v", deleted, err)
	}
	redistest.Eventually(t, func() string { return expectValues(c.values(t, key), "", "", "") })
	if ok, err := c.engine.expire(t.Context(), key, 10*time.Second); err != nil || ok {
		t.Fatalf("Expire of an absent key: %v, %v", ok, err)
	}
}
