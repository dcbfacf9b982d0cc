package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// listingLocker is a fakeLocker that lists locks too: the keys of page
// that start with the request's prefix, as the engine lists them.
type listingLocker struct {
	*fakeLocker
	page quorum.Listing
	err  error

	mu   sync.Mutex
	reqs []string
}

func (l *listingLocker) List(_ context.Context, req quorum.List) (quorum.Listing, error) {
	l.mu.Lock()
	l.reqs = append(l.reqs, fmt.Sprintf("%d %q %q %d", req.Cursor, req.Prefix, req.Match, req.Count))
	l.mu.Unlock()
	out := quorum.Listing{Cursor: l.page.Cursor}
	for _, h := range l.page.Locks {
		if strings.HasPrefix(h.Key, req.Prefix) {
			out.Locks = append(out.Locks, h)
		}
	}
	return out, l.err
}

func (l *listingLocker) seenLists() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reqs
	l.reqs = nil
	return r
}

func TestLockList(t *testing.T) {
	down := &quorum.NodeError{Node: 2, Addr: "c:3", Err: context.DeadlineExceeded}
	held := quorum.HeldLock{Key: "t1:a", Owner: "tok", Held: true, Validity: 1500 * time.Millisecond, Backends: []quorum.KeyPresence{
		{Addr: "a:1", Seen: true, Exists: true, HasValue: true, Value: "tok", TTL: 1600 * time.Millisecond},
		{Addr: "b:2", Seen: true},
		{Addr: "c:3", Err: down},
	}}
	free := quorum.HeldLock{Key: "t2:b", Backends: []quorum.KeyPresence{{Addr: "a:1", Seen: true, Exists: true, HasValue: true, Value: "x", NoExpiry: true}}}
	forever := quorum.HeldLock{Key: "t1:c", Owner: "f", Held: true, NoExpiry: true}
	undecided := quorum.HeldLock{Key: "t1:d", Undecided: true}
	locker := &listingLocker{fakeLocker: &fakeLocker{maxTTL: time.Minute},
		page: quorum.Listing{Cursor: 42, Locks: []quorum.HeldLock{held, free, forever, undecided}}}
	srv, err := New(locker, withFakes(locker, Config{Logger: slog.New(slog.DiscardHandler), Users: []User{
		{Name: "admin", PasswordSHA256: sha256Hex("root")},
		{Name: "t1", PasswordSHA256: sha256Hex("one"), KeyPrefix: "t1:"},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)

	bulk := func(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }
	// What held looks like in RESP2 (flat arrays), keyed as shown.
	heldRESP2 := func(key string) string {
		return "*10\r\n" + bulk("key") + bulk(key) + bulk("owner") + bulk("tok") + bulk("validity_ms") + ":1500\r\n" +
			bulk("state") + bulk("held") + bulk("backends") + "*3\r\n" +
			"*8\r\n" + bulk("addr") + bulk("a:1") + bulk("value") + bulk("tok") + bulk("pttl_ms") + ":1600\r\n" + bulk("error") + bulk("") +
			"*8\r\n" + bulk("addr") + bulk("b:2") + bulk("value") + "$-1\r\n" + bulk("pttl_ms") + ":-2\r\n" + bulk("error") + bulk("") +
			"*8\r\n" + bulk("addr") + bulk("c:3") + bulk("value") + "$-1\r\n" + bulk("pttl_ms") + "$-1\r\n" + bulk("error") + bulk("timeout")
	}
	for _, tc := range []struct {
		name  string
		user  []string // AUTH arguments
		hello bool     // HELLO 3 first
		cmd   []string
		want  string // whole reply, or its start when it ends with "…"
		lists []string
	}{
		{name: "admin sees every key, RESP2", user: []string{"admin", "root"}, cmd: []string{"LOCK.LIST", "0"},
			want: "*2\r\n" + bulk("42") + "*4\r\n" + heldRESP2("t1:a") + "…", lists: []string{`0 "" "" 0`}},
		{name: "a tenant sees its keys without its prefix", user: []string{"t1", "one"}, cmd: []string{"lock.list", "7", "MATCH", "a*", "count", "5"},
			want: "*2\r\n" + bulk("42") + "*3\r\n" + heldRESP2("a") +
				"*10\r\n" + bulk("key") + bulk("c") + bulk("owner") + bulk("f") + bulk("validity_ms") + ":-1\r\n" + bulk("state") + bulk("held") + bulk("backends") + "*0\r\n" +
				"*10\r\n" + bulk("key") + bulk("d") + bulk("owner") + "$-1\r\n" + bulk("validity_ms") + ":-2\r\n" + bulk("state") + bulk("undecided") + bulk("backends") + "*0\r\n",
			lists: []string{`7 "t1:" "a*" 5`}},
		{name: "RESP3 maps", user: []string{"admin", "root"}, hello: true, cmd: []string{"LOCK.LIST", "0", "MATCH", "t2:*"},
			want: "*2\r\n" + bulk("42") + "*4\r\n" + "%5\r\n" + bulk("key") + bulk("t1:a") + bulk("owner") + bulk("tok") + bulk("validity_ms") + ":1500\r\n" +
				bulk("state") + bulk("held") + bulk("backends") + "*3\r\n" +
				"%4\r\n" + bulk("addr") + bulk("a:1") + bulk("value") + bulk("tok") + bulk("pttl_ms") + ":1600\r\n" + bulk("error") + bulk("") +
				"%4\r\n" + bulk("addr") + bulk("b:2") + bulk("value") + "_\r\n" + "…", lists: []string{`0 "" "t2:*" 0`}},
		{name: "count capped", user: []string{"admin", "root"}, cmd: []string{"LOCK.LIST", "0", "COUNT", "1000000"}, want: "*2\r\n…", lists: []string{`0 "" "" 1000`}},
		{name: "count zero", user: []string{"admin", "root"}, cmd: []string{"LOCK.LIST", "0", "COUNT", "0"}, want: "-ERR syntax error\r\n"},
		{name: "count not integer", user: []string{"admin", "root"}, cmd: []string{"LOCK.LIST", "0", "COUNT", "x"}, want: "-ERR value is not an integer or out of range\r\n"},
		{name: "bad cursor", user: []string{"admin", "root"}, cmd: []string{"LOCK.LIST", "-1"}, want: "-ERR invalid cursor\r\n"},
		{name: "option without value", user: []string{"admin", "root"}, cmd: []string{"LOCK.LIST", "0", "MATCH"}, want: "-ERR syntax error\r\n"},
		{name: "no TYPE in LOCK.LIST", user: []string{"admin", "root"}, cmd: []string{"LOCK.LIST", "0", "TYPE", "string"}, want: "-ERR syntax error\r\n"},
		{name: "arity", user: []string{"admin", "root"}, cmd: []string{"LOCK.LIST"}, want: "-ERR wrong number of arguments for 'lock.list' command\r\n"},

		{name: "scan lists the held keys", user: []string{"t1", "one"}, cmd: []string{"SCAN", "0", "COUNT", "20"},
			want: "*2\r\n" + bulk("42") + "*2\r\n" + bulk("a") + bulk("c"), lists: []string{`0 "t1:" "" 20`}},
		{name: "scan type string", user: []string{"admin", "root"}, cmd: []string{"SCAN", "3", "TYPE", "STRING"},
			want: "*2\r\n" + bulk("42") + "*2\r\n" + bulk("t1:a") + bulk("t1:c"), lists: []string{`3 "" "" 0`}},
		{name: "scan type hash", user: []string{"admin", "root"}, cmd: []string{"SCAN", "3", "TYPE", "hash"},
			want: "*2\r\n" + bulk("42") + "*0\r\n", lists: []string{`3 "" "" 0`}},
		{name: "keys walks the listing", user: []string{"t1", "one"}, cmd: []string{"KEYS", "*"},
			want: "*2\r\n" + bulk("a") + bulk("c"), lists: []string{`0 "t1:" "*" 1000`, `42 "t1:" "*" 1000`}},
		{name: "dbsize counts the held keys", user: []string{"admin", "root"}, cmd: []string{"dbsize"},
			want: ":2\r\n", lists: []string{`0 "" "*" 1000`, `42 "" "*" 1000`}},
		{name: "unauthenticated", cmd: []string{"LOCK.LIST", "0"}, want: "-NOAUTH Authentication required.\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := connect(t, addr)
			if tc.user != nil {
				if r := w.do(append([]string{"AUTH"}, tc.user...)...); r != "+OK\r\n" {
					t.Fatalf("AUTH: %q", r)
				}
			}
			if tc.hello {
				w.do("HELLO", "3")
			}
			got := w.do(tc.cmd...)
			if prefix, ok := strings.CutSuffix(tc.want, "…"); ok {
				if !strings.HasPrefix(got, prefix) {
					t.Errorf("reply:\nwant %q…\ngot  %q", prefix, got)
				}
			} else if got != tc.want {
				t.Errorf("reply:\nwant %q\ngot  %q", tc.want, got)
			}
			if exp, got := fmt.Sprint(tc.lists), fmt.Sprint(locker.seenLists()); exp != got {
				t.Errorf("listings asked: want %s, got %s", exp, got)
			}
		})
	}

	t.Run("a listing that fails", func(t *testing.T) {
		locker.err = errors.New("boom")
		defer func() { locker.err = nil }()
		w := connect(t, addr)
		w.do("AUTH", "admin", "root")
		if exp, got := "-ERR internal error\r\n", w.do("LOCK.LIST", "0"); exp != got {
			t.Errorf("want %q, got %q", exp, got)
		}
	})
}

// TestLockListNeedsALister: a Lister that cannot list has LOCK.LIST and
// SCAN answer its error, not an empty listing.
func TestLockListNeedsALister(t *testing.T) {
	ts := startServer(t, Config{})
	runWireCases(t, ts, []wireCase{
		{name: "lock.list", cmd: []string{"LOCK.LIST", "0"}, want: "-ERR this lockproxy cannot list locks\r\n"},
		{name: "scan", cmd: []string{"SCAN", "0"}, want: "-ERR this lockproxy cannot list locks\r\n"},
	})
}
