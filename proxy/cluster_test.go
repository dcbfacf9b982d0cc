package proxy

import (
	"context"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/hashslot"
	"github.com/lockproxy/lockproxy/internal/redistest"
)

// startClusterNode serves a fake Locker as the cluster node announced at
// ln's address among nodes.
func startClusterNode(t *testing.T, ln net.Listener, nodes []string) *wire {
	t.Helper()
	srv, err := newWithFake(&fakeLocker{maxTTL: time.Minute, answer: returns(true)}, Config{
		Logger:  slog.New(slog.DiscardHandler),
		Cluster: ClusterConfig{Nodes: nodes, Announce: ln.Addr().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	})
	return connect(t, ln.Addr().String())
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestClusterTopology: two instances and a third that accepts no
// connections answer as one Redis Cluster of the two live ones, each the
// master of half the slots, with the same node ids; the dead one is
// flagged fail in CLUSTER NODES and given no slots.
func TestClusterTopology(t *testing.T) {
	ln1, ln2, gone := listen(t), listen(t), listen(t)
	goneAddr := gone.Addr().String()
	gone.Close()
	nodes := []string{ln1.Addr().String(), ln2.Addr().String(), goneAddr}
	w1 := startClusterNode(t, ln1, nodes)
	w2 := startClusterNode(t, ln2, nodes)

	id1, id2 := w1.do("CLUSTER", "MYID"), w2.do("CLUSTER", "MYID")
	if !regexp.MustCompile(`^\$40\r\n[0-9a-f]{40}\r\n$`).MatchString(id1) || id1 == id2 {
		t.Fatalf("CLUSTER MYID: %q and %q", id1, id2)
	}
	strip := func(bulk string) string { return strings.Split(bulk, "\r\n")[1] }
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	want := "*2\r\n" +
		"*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:" + port(nodes[0]) + "\r\n" + id1 +
		"*3\r\n:8192\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:" + port(nodes[1]) + "\r\n" + id2
	for _, w := range []*wire{w1, w2} {
		redistest.Eventually(t, func() string {
			if got := w.do("CLUSTER", "SLOTS"); got != want {
				return "CLUSTER SLOTS: " + got
			}
			return ""
		})
	}
	lines := strings.Split(strings.TrimSpace(w2.do("CLUSTER", "NODES")), "\n")
	if len(lines) != 4 || // the bulk header, then one line per node
		!strings.HasPrefix(lines[1], strip(id1)+" "+nodes[0]+"@0 master - 0 0 1 connected 0-8191") ||
		!strings.HasPrefix(lines[2], strip(id2)+" "+nodes[1]+"@0 myself,master - 0 0 1 connected 8192-16383") ||
		!strings.Contains(lines[3], " "+goneAddr+"@0 master,fail - 0 0 1 disconnected") {
		t.Errorf("CLUSTER NODES:\n%s", strings.Join(lines, "\n"))
	}
	if got := w1.do("CLUSTER", "INFO"); !strings.Contains(got, "cluster_state:ok\r\n") || !strings.Contains(got, "cluster_known_nodes:3\r\ncluster_size:2\r\n") {
		t.Errorf("CLUSTER INFO: %q", got)
	}
	if got := w1.do("CLUSTER", "SHARDS"); !strings.HasPrefix(got, "*2\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:8191\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n"+id1) {
		t.Errorf("CLUSTER SHARDS: %q", got)
	}
	for _, c := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"CLUSTER", "KEYSLOT", "foo"}, ":12182\r\n"},
		{[]string{"READONLY"}, "+OK\r\n"},
		{[]string{"READWRITE"}, "+OK\r\n"},
		{[]string{"ASKING"}, "+OK\r\n"},
		{[]string{"INFO", "cluster"}, "$30\r\n# Cluster\r\ncluster_enabled:1\r\n\r\n"},
	} {
		if got := w1.do(c.cmd...); got != c.want {
			t.Errorf("%v: %q, want %q", c.cmd, got, c.want)
		}
	}
}

// TestClusterCrossSlot: in cluster mode a command, or a transaction, whose
// keys hash to different slots is refused as Redis Cluster refuses it;
// keys that share a hash tag are served.
func TestClusterCrossSlot(t *testing.T) {
	ln := listen(t)
	w := startClusterNode(t, ln, []string{ln.Addr().String()})
	const cross = "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
	for _, c := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"DEL", "a", "b"}, cross},
		{[]string{"EXISTS", "a", "b"}, cross},
		{[]string{"EVAL", "return 1", "2", "a", "b"}, cross},
		{[]string{"BLPOP", "a", "b", "0"}, cross},
		{[]string{"WATCH", "a", "b"}, cross},
		{[]string{"DEL", "{t}a", "{t}b"}, ":2\r\n"},
		{[]string{"EVAL", "return 1", "1", "a", "b"}, ""}, // one key: not refused for its slot
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"DEL", "{x}a"}, "+QUEUED\r\n"},
		{[]string{"DEL", "{y}a"}, "+QUEUED\r\n"},
		{[]string{"EXEC"}, cross},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"DEL", "a", "b"}, cross},
		{[]string{"EXEC"}, "-EXECABORT Transaction discarded because of previous errors.\r\n"},
	} {
		got := w.do(c.cmd...)
		if c.want == "" {
			if got == cross {
				t.Errorf("%v: %q", c.cmd, got)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%v: %q, want %q", c.cmd, got, c.want)
		}
	}
}

// TestClusterConfig: cluster settings that cannot describe a cluster are
// refused at start.
func TestClusterConfig(t *testing.T) {
	for _, c := range []ClusterConfig{
		{Announce: "127.0.0.1:7000"},
		{Nodes: []string{"127.0.0.1:7000"}, Announce: "127.0.0.1:7001"},
		{Nodes: []string{"127.0.0.1:7000", "127.0.0.1:7000"}, Announce: "127.0.0.1:7000"},
		{Nodes: []string{"127.0.0.1"}, Announce: "127.0.0.1"},
		{Nodes: []string{"127.0.0.1:99999"}, Announce: "127.0.0.1:99999"},
	} {
		if _, err := newWithFake(&fakeLocker{}, Config{Cluster: c}); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestCrossGroupRefusal: a Locker that refuses keys of several shard
// groups (hashslot.ErrCrossSlot) is answered as Redis Cluster answers keys
// of several slots, standalone or not.
func TestCrossGroupRefusal(t *testing.T) {
	ts := startServer(t, Config{})
	ts.fake.reset(fails(hashslot.ErrCrossSlot))
	if got := connect(t, ts.addr).do("SET", "k", "v", "NX", "PX", "1000"); got != "-CROSSSLOT Keys in request don't hash to the same slot\r\n" {
		t.Errorf("SET refused for its group: %q", got)
	}
}
