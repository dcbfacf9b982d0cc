package proxy

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/internal/hashslot"
	"github.com/tidwall/redcon"
)

// Cluster mode. Applications configured for Redis Cluster (JedisCluster,
// Lettuce's and go-redis's cluster clients, redis-py's RedisCluster,
// ioredis's Cluster) ask a server for its topology at connect and refuse
// one that is not a cluster. With Config.Cluster set, the proxy answers
// them as one: the configured instances are the nodes, each the master of
// an equal share of the slots. Every instance serves every slot, so no
// MOVED is ever needed, and a client whose map is stale is still served.
// An instance that stops accepting connections is left out of the map
// that the others give (the slots are shared among the ones left), so a
// client that refreshes its topology after a failed connection finds a
// live node for every slot.

// ClusterConfig names the lockproxy instances that cluster-mode clients
// see as the nodes of one cluster.
type ClusterConfig struct {
	// Nodes are every instance's address as clients reach it, host:port,
	// in the same order on every instance; Announce is this one's, among
	// them. Empty Nodes: the proxy is a standalone server, and CLUSTER,
	// READONLY, READWRITE and ASKING answer as Redis does without cluster
	// support.
	Nodes    []string
	Announce string
}

// errClusterDisabled is Redis's answer to cluster commands when it runs
// standalone.
var errClusterDisabled = errorf("ERR This instance has cluster support disabled")

// errCrossSlot is Redis Cluster's refusal of a request whose keys hash to
// different slots.
var errCrossSlot = errorf("CROSSSLOT Keys in request don't hash to the same slot")

// clusterProbeEvery is how often each instance checks that the others
// accept connections.
const clusterProbeEvery = time.Second

type clusterNode struct {
	addr, host string
	port       int
	id         string // 40 hex digits, the same on every instance
	alive      atomic.Bool
	seen       bool // it once accepted a connection (probe's own)
}

type cluster struct {
	nodes []*clusterNode
	self  int
}

// newCluster checks cfg and returns the cluster it describes, or nil for
// a standalone server.
func newCluster(cfg ClusterConfig) (*cluster, error) {
	if len(cfg.Nodes) == 0 {
		if cfg.Announce != "" {
			return nil, errors.New("proxy: a cluster address to announce, but no cluster nodes")
		}
		return nil, nil
	}
	c := &cluster{self: -1}
	for _, addr := range cfg.Nodes {
		host, portText, err := net.SplitHostPort(addr)
		port, perr := strconv.Atoi(portText)
		if err != nil || perr != nil || host == "" || port < 1 || port > 65535 {
			return nil, fmt.Errorf("proxy: cluster node %q is not host:port", addr)
		}
		if slices.ContainsFunc(c.nodes, func(n *clusterNode) bool { return n.addr == addr }) {
			return nil, fmt.Errorf("proxy: cluster node %s is named twice", addr)
		}
		sum := sha1.Sum([]byte("lockproxy cluster node " + addr))
		n := &clusterNode{addr: addr, host: host, port: port, id: hex.EncodeToString(sum[:])}
		n.alive.Store(true) // until a probe says otherwise
		if addr == cfg.Announce {
			c.self = len(c.nodes)
		}
		c.nodes = append(c.nodes, n)
	}
	if c.self < 0 {
		return nil, fmt.Errorf("proxy: the address to announce, %q, is not among the cluster nodes %s", cfg.Announce, strings.Join(cfg.Nodes, ","))
	}
	return c, nil
}

// probe checks, until stop is closed, that the other instances accept
// connections: the map leaves out those that do not.
func (c *cluster) probe(stop <-chan struct{}, s *Server) {
	t := time.NewTicker(clusterProbeEvery)
	defer t.Stop()
	for {
		for i, n := range c.nodes {
			if i == c.self {
				continue
			}
			conn, err := net.DialTimeout("tcp", n.addr, clusterProbeEvery)
			if err == nil {
				conn.Close()
			}
			was := n.alive.Swap(err == nil)
			switch {
			case err == nil && !n.seen:
				s.log.Info("cluster node accepts connections", "node", n.addr)
			case err == nil && !was:
				s.log.Info("cluster node accepts connections again", "node", n.addr)
			case err != nil && was && n.seen:
				s.log.Warn("cluster node does not accept connections: its slots go to the others until it does", "node", n.addr, "err", err)
			case err != nil && was:
				// Instances start one after another: not news yet.
				s.log.Info("cluster node does not accept connections yet: its slots go to the others until it does", "node", n.addr, "err", err)
			}
			n.seen = n.seen || err == nil
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// nodeSlots is a node and the slots it is master of.
type nodeSlots struct {
	node       *clusterNode
	start, end int
}

// shards shares the slots among the live nodes, in configuration order,
// each a contiguous range.
func (c *cluster) shards() []nodeSlots {
	var live []*clusterNode
	for i, n := range c.nodes {
		if i == c.self || n.alive.Load() {
			live = append(live, n)
		}
	}
	out := make([]nodeSlots, len(live))
	for i, n := range live {
		out[i] = nodeSlots{node: n, start: i * hashslot.Count / len(live), end: (i+1)*hashslot.Count/len(live) - 1}
	}
	return out
}

// handleCluster refuses every CLUSTER subcommand of a standalone server,
// as Redis does, and serves the rest.
func (s *Server) clusterCommand(run func(redcon.Conn, redcon.Command)) func(redcon.Conn, redcon.Command) {
	return func(conn redcon.Conn, cmd redcon.Command) {
		if s.cluster == nil {
			s.writeError(conn, errClusterDisabled)
			return
		}
		run(conn, cmd)
	}
}

// handleClusterSlots serves CLUSTER SLOTS: each live node's range, with
// the node as its master and no replicas.
func (s *Server) handleClusterSlots(conn redcon.Conn, _ redcon.Command) {
	shards := s.cluster.shards()
	conn.WriteArray(len(shards))
	for _, sh := range shards {
		conn.WriteArray(3)
		conn.WriteInt(sh.start)
		conn.WriteInt(sh.end)
		conn.WriteArray(3)
		conn.WriteBulkString(sh.node.host)
		conn.WriteInt(sh.node.port)
		conn.WriteBulkString(sh.node.id)
	}
}

// handleClusterShards serves CLUSTER SHARDS (Redis 7): each live node a
// shard of one master.
func (s *Server) handleClusterShards(conn redcon.Conn, _ redcon.Command) {
	shards := s.cluster.shards()
	conn.WriteArray(len(shards))
	for _, sh := range shards {
		writeMapLen(conn, 2)
		conn.WriteBulkString("slots")
		conn.WriteArray(2)
		conn.WriteInt(sh.start)
		conn.WriteInt(sh.end)
		conn.WriteBulkString("nodes")
		conn.WriteArray(1)
		writeMapLen(conn, 7)
		for _, kv := range [][2]string{{"id", sh.node.id}, {"port", ""}, {"ip", sh.node.host}, {"endpoint", sh.node.host},
			{"role", "master"}, {"replication-offset", ""}, {"health", "online"}} {
			conn.WriteBulkString(kv[0])
			switch kv[0] {
			case "port":
				conn.WriteInt(sh.node.port)
			case "replication-offset":
				conn.WriteInt(0)
			default:
				conn.WriteBulkString(kv[1])
			}
		}
	}
}

// handleClusterNodes serves CLUSTER NODES in Redis's format: one line per
// node, a node that does not accept connections flagged fail, with no
// slots.
func (s *Server) handleClusterNodes(conn redcon.Conn, _ redcon.Command) {
	slots := map[*clusterNode]string{}
	for _, sh := range s.cluster.shards() {
		slots[sh.node] = fmt.Sprintf(" %d-%d", sh.start, sh.end)
	}
	var b strings.Builder
	for i, n := range s.cluster.nodes {
		flags := "master"
		switch {
		case i == s.cluster.self:
			flags = "myself,master"
		case slots[n] == "":
			flags = "master,fail"
		}
		link := "connected"
		if slots[n] == "" {
			link = "disconnected"
		}
		fmt.Fprintf(&b, "%s %s@0 %s - 0 0 1 %s%s\n", n.id, net.JoinHostPort(n.host, strconv.Itoa(n.port)), flags, link, slots[n])
	}
	conn.WriteBulkString(b.String())
}

// handleClusterInfo serves CLUSTER INFO: a healthy cluster of the live
// nodes, every slot served.
func (s *Server) handleClusterInfo(conn redcon.Conn, _ redcon.Command) {
	live := len(s.cluster.shards())
	conn.WriteBulkString(fmt.Sprintf("cluster_state:ok\r\ncluster_slots_assigned:%d\r\ncluster_slots_ok:%d\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\n"+
		"cluster_known_nodes:%d\r\ncluster_size:%d\r\ncluster_current_epoch:1\r\ncluster_my_epoch:1\r\n"+
		"cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
		hashslot.Count, hashslot.Count, len(s.cluster.nodes), live))
}

// handleClusterMyID serves CLUSTER MYID and CLUSTER MYSHARDID: each node
// is its own shard.
func (s *Server) handleClusterMyID(conn redcon.Conn, _ redcon.Command) {
	conn.WriteBulkString(s.cluster.nodes[s.cluster.self].id)
}

// handleClusterKeySlot serves CLUSTER KEYSLOT key.
func (s *Server) handleClusterKeySlot(conn redcon.Conn, cmd redcon.Command) {
	conn.WriteInt(hashslot.Of(string(cmd.Args[2])))
}

// handleClusterNoListing refuses CLUSTER COUNTKEYSINSLOT and
// GETKEYSINSLOT, as KEYS and DBSIZE are refused.
func (s *Server) handleClusterNoListing(conn redcon.Conn, cmd redcon.Command) {
	s.writeError(conn, errorf("ERR lockproxy does not count or list keys by slot; list locks with SCAN cursor [MATCH pattern] [COUNT n] or LOCK.LIST cursor [MATCH pattern] [COUNT n]"))
}

// handleClusterOK serves READONLY, READWRITE and ASKING: every node serves
// every slot, reads and writes alike.
func (s *Server) handleClusterOK(conn redcon.Conn, _ redcon.Command) {
	conn.WriteString("OK")
}

// crossSlot refuses, in cluster mode, a command whose keys hash to more
// than one slot, as Redis Cluster does: an application that runs here
// unchanged runs on a real cluster too, and on shard groups.
func (s *Server) crossSlot(c *command, args [][]byte) error {
	if s.cluster == nil {
		return nil
	}
	slot := -1
	for _, key := range commandKeys(c, args) {
		switch k := hashslot.Of(string(key)); {
		case slot < 0:
			slot = k
		case k != slot:
			return errCrossSlot
		}
	}
	return nil
}

// txCrossSlot refuses, in cluster mode, a transaction whose queued
// commands' keys hash to more than one slot, as Redis Cluster refuses its
// EXEC.
func (s *Server) txCrossSlot(queued [][][]byte) error {
	if s.cluster == nil {
		return nil
	}
	var all [][]byte
	for _, args := range queued {
		if c, err := s.lookup(args); err == nil {
			all = append(all, commandKeys(c, args)...)
		}
	}
	for _, key := range all {
		if hashslot.Of(string(key)) != hashslot.Of(string(all[0])) {
			return errCrossSlot
		}
	}
	return nil
}
