package hashslot

import (
	"context"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestOf: the check value of the CRC Redis Cluster's specification gives,
// and the hash tag rules of its examples.
func TestOf(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for _, tc := range []struct {
		key  string
		slot int
	}{
		{"foo", 12182},
		{"{user1000}.following", Of("user1000")},
		{"{user1000}.followers", Of("user1000")},
		{"foo{}{bar}", int(crc16("foo{}{bar}")) % Count},
		{"foo{{bar}}zap", Of("{bar")},
		{"foo{bar}{zap}", Of("bar")},
		{"{", int(crc16("{")) % Count},
	} {
		if got := Of(tc.key); got != tc.slot {
			t.Errorf("Of(%q) = %d, want %d", tc.key, got, tc.slot)
		}
	}
}

// TestOfAgreesWithRedis: a real redis-server started in cluster mode
// answers CLUSTER KEYSLOT as Of does, for keys with and without tags.
func TestOfAgreesWithRedis(t *testing.T) {
	// Its dir is its own temporary one, where it writes nodes.conf.
	rdb := redistest.Start(t, "--cluster-enabled", "yes").Client(t)
	ctx := context.Background()
	for _, key := range []string{"", "a", "lock:order:42", "{tag}x", "x{tag}", "{}x", "a{b}{c}", "{{}}", "\xff\x00{\x01}"} {
		want, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		if got := Of(key); int64(got) != want {
			t.Errorf("Of(%q) = %d, Redis says %d", key, got, want)
		}
	}
}
