package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lockproxy/lockproxy/shard"
	"github.com/tidwall/redcon"
)

// Pub/sub, for the lock libraries that wait for a release on an unlock
// channel (channels.go). A connection that subscribes is in Redis's
// subscribed mode, with Redis 7.0's replies in RESP2 and RESP3 (pushes);
// its messages are written by a pushWriter (push.go) while its goroutine
// reads its next command.
//
// Where messages come from:
//   - A release or delete of a lock key through any proxy: the engine
//     hears it from the backends (keyspace.Releases), and each
//     subscription whose channel (or pattern) tells of that key gets one
//     message (or pmessage) per release, in its library's words.
//   - A client's PUBLISH to an unlock channel: this proxy's subscribers
//     get it at once (the reply counts them), and it is relayed through
//     the backends (ReleaseWatcher.Relay) to every other proxy's, each of
//     which hears its N copies as one.
//
// A backend's own pub/sub traffic is never forwarded to a client.

// ReleaseWatcher is what pub/sub and client tracking need of the lock
// engine: it hears the releases of lock keys through any proxy, and
// carries messages between proxies (shard.Groups's methods of the same
// names). Each user's keyspace applies its key prefix to both.
type ReleaseWatcher interface {
	// Releases calls fn(key, token) once per release or delete of a key
	// that matches the glob pattern, until stop; it returns once the
	// releases after it are heard. fn must not block.
	Releases(pattern string, fn func(key, token string)) (stop func())
	// Relay sends message on topic to every proxy's Relayed callers.
	Relay(ctx context.Context, topic, message string) error
	// Relayed calls fn(topic, message) once per Relay, through any proxy,
	// of a topic that matches the glob pattern, until stop. fn must not
	// block.
	Relayed(pattern string, fn func(topic, message string)) (stop func())
}

var _ ReleaseWatcher = (*shard.Groups)(nil)

// subscriber is a connection in subscribed mode: its subscriptions and
// the writer of its output. Only the connection's goroutine adds and
// drops subscriptions; deliveries come from the engine's goroutines.
type subscriber struct {
	s     *Server
	push  *pushWriter
	ks    *keyspace // the user's, in its database: the subscriber hears its own keys only
	proto atomic.Int32

	// mu orders deliveries against the subscription replies: a message is
	// queued only while its subscription is live, and a subscription is
	// made live in the same hold as its reply is queued, so that no
	// message comes before its subscribe reply or after its unsubscribe
	// reply.
	mu       sync.Mutex
	channels []*subscription // in the order subscribed
	patterns []*subscription
}

// subscription is one channel or pattern of a subscriber.
type subscription struct {
	name    string
	pattern bool
	lc      *lockChannel
	live    bool // guarded by subscriber.mu
	stop    func()
}

// pubsubHub is the server's subscribers, for the messages PUBLISHed
// through this proxy or relayed from others.
type pubsubHub struct {
	mu        sync.Mutex
	subs      map[*subscriber]struct{}
	stopRelay func() // the relay watch, while there are subscribers
	origin    string // this proxy's id in relayed messages
	delivered atomic.Uint64
}

func newPubsubHub() *pubsubHub {
	id := make([]byte, 8)
	rand.Read(id)
	return &pubsubHub{subs: map[*subscriber]struct{}{}, origin: hex.EncodeToString(id)}
}

func (sub *subscriber) count() int { return len(sub.channels) + len(sub.patterns) }

// subscribed is the connection's subscriber when it is in subscribed mode.
func subscribed(conn redcon.Conn) *subscriber {
	if sub := state(conn).sub; sub != nil && sub.count() > 0 {
		return sub
	}
	return nil
}

// handleSubscribe serves SUBSCRIBE channel ... and PSUBSCRIBE pattern ...
func (s *Server) handleSubscribe(conn redcon.Conn, cmd redcon.Command) {
	pattern := strings.EqualFold(string(cmd.Args[0]), "psubscribe")
	verb := "subscribe"
	if pattern {
		verb = "psubscribe"
	}
	c, ok := conn.(*client)
	if !ok {
		s.writeError(conn, errorf("ERR %s is served only as a command of its own", strings.ToUpper(verb)))
		return
	}
	lcs := make([]*lockChannel, len(cmd.Args)-1)
	globs := make([]string, len(lcs))
	for i, a := range cmd.Args[1:] {
		if !pattern && string(a) == invalidateChannel {
			continue
		}
		if lcs[i], globs[i], ok = channelOf(string(a), pattern); !ok {
			s.writeError(conn, errNotLockChannel(strings.ToUpper(verb), string(a)))
			return
		}
	}
	sub := s.subscriberOf(c)
	for i, a := range cmd.Args[1:] {
		name := string(a)
		list := &sub.channels
		if pattern {
			list = &sub.patterns
		}
		if !containsSub(*list, name) {
			sp := &subscription{name: name, pattern: pattern, lc: lcs[i]}
			if lcs[i] == nil {
				// CLIENT TRACKING's REDIRECT target (tracking.go).
				id := state(c).id
				s.tracking.listen(id, sub, sp)
				sp.stop = func() { s.tracking.listen(id, nil, nil) }
			} else {
				sp.stop = sub.ks.Releases(globs[i], func(key, _ string) { sub.released(sp, key) })
			}
			*list = append(*list, sp)
		}
		sub.writeReply(c, verb, name, true)
	}
}

// handleUnsubscribe serves UNSUBSCRIBE [channel ...] and PUNSUBSCRIBE
// [pattern ...]: every one when none is named.
func (s *Server) handleUnsubscribe(conn redcon.Conn, cmd redcon.Command) {
	pattern := strings.EqualFold(string(cmd.Args[0]), "punsubscribe")
	verb := "unsubscribe"
	if pattern {
		verb = "punsubscribe"
	}
	sub := state(conn).sub
	var names []string
	for _, a := range cmd.Args[1:] {
		names = append(names, string(a))
	}
	if len(names) == 0 && sub != nil {
		for _, sp := range sub.list(pattern) {
			names = append(names, sp.name)
		}
	}
	if len(names) == 0 {
		// Nothing to leave: Redis says so with a null name, and the
		// count of the other kind's subscriptions.
		count := 0
		if sub != nil {
			count = sub.count()
		}
		writeSubReply(conn, state(conn).proto, verb, nil, count)
		return
	}
	for _, name := range names {
		if sub == nil {
			writeSubReply(conn, state(conn).proto, verb, &name, 0)
			continue
		}
		sub.drop(pattern, name)
		sub.writeReply(conn.(*client), verb, name, false)
	}
	if sub != nil && sub.count() == 0 {
		s.hub.leave(sub)
	}
}

// subscriberOf is c's subscriber, made (with its writer) on the first
// SUBSCRIBE; from then on all of c's output goes through the writer.
func (s *Server) subscriberOf(c *client) *subscriber {
	st := state(c)
	if st.sub == nil {
		if c.push == nil {
			c.push = newPushWriter(c.conn, c.writeTimeout)
		}
		st.sub = &subscriber{s: s, push: c.push, ks: space(c)}
	}
	st.sub.proto.Store(int32(st.proto))
	s.hub.join(st.sub)
	return st.sub
}

// writeReply queues the reply to a (p)(un)subscribe of name, with the
// connection's replies before it, and makes the subscription live (on) or
// dead in the same hold.
func (sub *subscriber) writeReply(c *client, verb, name string, on bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for _, sp := range sub.list(strings.HasPrefix(verb, "p")) {
		if sp.name == name {
			sp.live = on
		}
	}
	writeSubReply(c, state(c).proto, verb, &name, sub.count())
	c.werr = sub.push.send(c.out)
	c.out = c.out[:0]
}

func (sub *subscriber) list(pattern bool) []*subscription {
	if pattern {
		return sub.patterns
	}
	return sub.channels
}

// drop ends the subscription to name, if any.
func (sub *subscriber) drop(pattern bool, name string) {
	sub.mu.Lock()
	list := &sub.channels
	if pattern {
		list = &sub.patterns
	}
	var gone *subscription
	for i, sp := range *list {
		if sp.name == name {
			gone = sp
			sp.live = false
			*list = append((*list)[:i:i], (*list)[i+1:]...)
			break
		}
	}
	sub.mu.Unlock()
	if gone != nil {
		gone.stop()
	}
}

// dropAll ends every subscription without a reply, as RESET and a closed
// connection do.
func (sub *subscriber) dropAll() {
	sub.mu.Lock()
	all := append(sub.channels, sub.patterns...)
	sub.channels, sub.patterns = nil, nil
	for _, sp := range all {
		sp.live = false
	}
	sub.mu.Unlock()
	for _, sp := range all {
		sp.stop()
	}
	sub.s.hub.leave(sub)
}

func containsSub(list []*subscription, name string) bool {
	for _, sp := range list {
		if sp.name == name {
			return true
		}
	}
	return false
}

// writeSubReply writes ["subscribe", name, count] and its kin; a nil name
// is a null.
func writeSubReply(conn redcon.Conn, proto int, verb string, name *string, count int) {
	writeAggregate(conn, proto, 3)
	conn.WriteBulkString(verb)
	if name == nil {
		writeNull(conn)
	} else {
		conn.WriteBulkString(*name)
	}
	conn.WriteInt(count)
}

// writeAggregate starts a pub/sub frame of n elements: a push (">") in
// RESP3, an array in RESP2.
func writeAggregate(conn interface {
	WriteRaw([]byte)
	WriteArray(int)
}, proto, n int) {
	if proto == 3 {
		conn.WriteRaw(strconv.AppendInt([]byte{'>'}, int64(n), 10))
		conn.WriteRaw([]byte("\r\n"))
		return
	}
	conn.WriteArray(n)
}

// released tells sp of the release of a key (as the user names it) that
// its glob matched.
func (sub *subscriber) released(sp *subscription, key string) {
	payload := sp.lc.payload(key)
	if !sp.pattern {
		if slices.Contains(sp.lc.channels(key), sp.name) {
			sub.deliver(sp, sp.name, payload)
		}
		return
	}
	// One pmessage per release, on the first of the library's channels
	// for the key that the pattern matches, as Redis sends one for the
	// one channel published on.
	for _, ch := range sp.lc.channels(key) {
		if globMatch(sp.name, ch) {
			sub.deliver(sp, ch, payload)
			return
		}
	}
}

// deliver queues a message for sp, on channel, if sp is still live; it
// reports whether it did.
func (sub *subscriber) deliver(sp *subscription, channel, payload string) bool {
	r := &replies{}
	proto := int(sub.proto.Load())
	if sp.pattern {
		writeAggregate(r, proto, 4)
		r.WriteBulkString("pmessage")
		r.WriteBulkString(sp.name)
	} else {
		writeAggregate(r, proto, 3)
		r.WriteBulkString("message")
	}
	r.WriteBulkString(channel)
	r.WriteBulkString(payload)
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sp.live || sub.push.send(r.out) != nil {
		return false
	}
	sub.s.hub.delivered.Add(1)
	return true
}

// publish delivers payload on channel (in the user space of prefix) to
// this proxy's subscribers, and returns how many subscriptions got it.
func (h *pubsubHub) publish(prefix, channel, payload string) int {
	h.mu.Lock()
	subs := make([]*subscriber, 0, len(h.subs))
	for sub := range h.subs {
		if sub.ks.prefix == prefix {
			subs = append(subs, sub)
		}
	}
	h.mu.Unlock()
	n := 0
	for _, sub := range subs {
		sub.mu.Lock()
		var to []*subscription
		for _, sp := range sub.channels {
			if sp.name == channel {
				to = append(to, sp)
			}
		}
		for _, sp := range sub.patterns {
			if globMatch(sp.name, channel) {
				to = append(to, sp)
			}
		}
		sub.mu.Unlock()
		for _, sp := range to {
			if sub.deliver(sp, channel, payload) {
				n++
			}
		}
	}
	return n
}

// counts are the subscribed connections, and their channels and patterns.
func (h *pubsubHub) counts() (clients, channels, patterns int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		sub.mu.Lock()
		clients, channels, patterns = clients+1, channels+len(sub.channels), patterns+len(sub.patterns)
		sub.mu.Unlock()
	}
	return clients, channels, patterns
}

// join counts sub among the hub's subscribers, watching the relay from
// the other proxies while there are any.
func (h *pubsubHub) join(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[sub]; ok {
		return
	}
	h.subs[sub] = struct{}{}
	if h.stopRelay == nil {
		// Every user's channels in one watch: relayed reads the user's
		// prefix from the topic.
		h.stopRelay = sub.s.watcher.Relayed("*", h.relayed)
	}
}

// leave drops sub; the last one out stops the relay watch.
func (h *pubsubHub) leave(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, sub)
	if len(h.subs) == 0 && h.stopRelay != nil {
		h.stopRelay()
		h.stopRelay = nil
	}
}

// relayed hears a PUBLISH made through some proxy: topic is a keyspace's
// (relayedTopic); message the origin proxy, a NUL, and the payload. The
// origin's own subscribers have it already.
func (h *pubsubHub) relayed(topic, message string) {
	prefix, channel, ok1 := relayedTopic(topic)
	origin, payload, ok2 := strings.Cut(message, "\x00")
	if !ok1 || !ok2 || origin == h.origin {
		return
	}
	h.publish(prefix, channel, payload)
}

// handlePublish serves PUBLISH channel message for unlock channels: this
// proxy's subscribers get it at once, and the reply counts them, as Redis
// Cluster counts only the node's own; every other proxy's get it through
// the backends.
func (s *Server) handlePublish(conn redcon.Conn, cmd redcon.Command) {
	channel, payload := string(cmd.Args[1]), string(cmd.Args[2])
	if _, _, ok := channelOf(channel, false); !ok {
		s.writeError(conn, errNotLockChannel("PUBLISH", channel))
		return
	}
	ks := space(conn)
	n := s.hub.publish(ks.prefix, channel, payload)
	if err := ks.Relay(s.ctx, channel, s.hub.origin+"\x00"+payload); err != nil {
		s.log.Warn("proxy: PUBLISH not relayed to the other proxies", "channel", channel, "err", err)
	}
	conn.WriteInt(n)
}
