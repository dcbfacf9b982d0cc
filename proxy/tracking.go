package proxy

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// Client-side caching (CLIENT TRACKING), for the clients that turn it on
// at connect (rueidis, valkey-go) and the lock packages that wait for a
// key's invalidation (rueidislock, valkeylock). A tracking connection's
// reads register their keys (all of them in OPTOUT mode, those after
// CLIENT CACHING YES in OPTIN mode); BCAST registers key prefixes
// instead. Each registered key is invalidated once, by a RESP3 push
// message, at the next change of it that this proxy sees:
//   - every acquisition, extension, release, deletion and expiry set
//     through this proxy, whichever connection made it (trackedLocker);
//   - every release and deletion through any other proxy of the
//     deployment: the release notices that waiting uses.
// Acquisitions and extensions through another proxy, and a lock's
// running out on the backends, are not told: a client caches a lock's
// value at most for the PTTL it read with it (rueidis reads both), and a
// waiter that watches a held key tries again on its own timer.
//
// Keys are registered in the Locker's space (the user's prefix and the
// database's marker in front), and told in the client's: a tenant never
// hears of a key outside its prefix, BCAST prefixes included.
//
// RESP2 has no push messages: there a tracking connection names another
// one (REDIRECT id) that has subscribed to __redis__:invalidate, and its
// invalidations come to that one as pub/sub messages, as on Redis. A
// RESP3 target gets them as pushes, if it has subscribed there too.

// tracker is one connection's CLIENT TRACKING state.
type tracker struct {
	push *pushWriter // nil for a RESP2 connection, which redirects
	// Set by CLIENT TRACKING ON, under tracking.mu.
	on, bcast, optin, optout, noloop bool
	prefixes                         []trackedPrefix // BCAST's, in the Locker's space
	redirect                         int64           // the connection told instead, if not 0
	// caching is CLIENT CACHING's for the next command: 1 yes, -1 no.
	caching atomic.Int32
	// busy counts the keys this connection's own writes in flight touch,
	// which NOLOOP keeps it from hearing of.
	busyMu sync.Mutex
	busy   map[string]int
	// written are the keys its own writes changed lately, and when: the
	// release notice of such a change comes back from the backends after
	// the write, and is its own too.
	written map[string]time.Time
}

// ownNoticeWindow bounds how long after its own write a NOLOOP
// connection's key is taken to be changed by that write when a release
// notice of it comes.
const ownNoticeWindow = 2 * time.Second

// trackedPrefix is a BCAST prefix: full in the Locker's space, where the
// client's key space starts at space.
type trackedPrefix struct{ full, space string }

// tracking is the server's registry of tracked keys.
type tracking struct {
	on atomic.Int64 // trackers on: no work at all while 0

	mu    sync.Mutex
	keys  map[string]map[*tracker]string // Locker key → tracker → the key as its client named it
	bcast map[*tracker]struct{}
	// watching is set once the other proxies' releases are followed.
	watching bool

	// conns are the open connections, by id, that REDIRECT may name,
	// each with its subscription to invalidateChannel, nil while it has
	// none. Only the connection's own goroutine stores its entry.
	conns sync.Map // int64 → *redirectTarget
}

// redirectTarget is where the invalidations redirected to a connection
// go: its subscription to invalidateChannel.
type redirectTarget struct {
	sub *subscriber
	sp  *subscription
}

// invalidateChannel is where Redis tells a RESP2 connection of the
// changes that the connections redirecting to it track.
const invalidateChannel = "__redis__:invalidate"

func newTracking() *tracking {
	return &tracking{keys: map[string]map[*tracker]string{}, bcast: map[*tracker]struct{}{}}
}

func (tr *tracking) opened(id int64) { tr.conns.Store(id, (*redirectTarget)(nil)) }
func (tr *tracking) closed(id int64) { tr.conns.Delete(id) }

func (tr *tracking) exists(id int64) bool {
	_, ok := tr.conns.Load(id)
	return ok
}

// listen makes sp, a subscription of sub to invalidateChannel, where the
// invalidations redirected to connection id go; nil sp ends it.
func (tr *tracking) listen(id int64, sub *subscriber, sp *subscription) {
	var rt *redirectTarget
	if sp != nil {
		rt = &redirectTarget{sub, sp}
	}
	if tr.exists(id) {
		tr.conns.Store(id, rt)
	}
}

// register notes that t read key (as the Locker has it; named as the
// client named it).
func (tr *tracking) register(t *tracker, full, name string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !t.on || t.bcast {
		return
	}
	m := tr.keys[full]
	if m == nil {
		m = map[*tracker]string{}
		tr.keys[full] = m
	}
	m[t] = name
}

// invalidate tells every tracker of key (in the Locker's space) that it
// changed, once: the key is forgotten until read again.
func (tr *tracking) invalidate(key string) { tr.tell(key, false) }

// noticed is invalidate for a release notice from the backends, which
// may be of a NOLOOP connection's own change.
func (tr *tracking) noticed(key string) { tr.tell(key, true) }

func (tr *tracking) tell(key string, notice bool) {
	if tr.on.Load() == 0 {
		return
	}
	type note struct {
		t        *tracker
		name     string
		redirect int64
	}
	var notes []note
	tr.mu.Lock()
	// A NOLOOP connection is not told of its own change. Its registration
	// goes with the change, as on Redis, but for a release notice that
	// comes back after its write: it registered again since.
	var kept map[*tracker]string
	for t, name := range tr.keys[key] {
		switch {
		case !t.noloop || !t.ownChange(key, notice):
			notes = append(notes, note{t, name, t.redirect})
		case notice:
			if kept == nil {
				kept = map[*tracker]string{}
			}
			kept[t] = name
		}
	}
	if kept != nil {
		tr.keys[key] = kept
	} else {
		delete(tr.keys, key)
	}
	for t := range tr.bcast {
		if t.noloop && t.ownChange(key, notice) {
			continue
		}
		for _, p := range t.prefixes {
			if strings.HasPrefix(key, p.full) {
				name := key[len(p.space):]
				if p.space == "" || !strings.HasPrefix(name, dbMarkerStart) {
					notes = append(notes, note{t, name, t.redirect})
				}
				break
			}
		}
	}
	tr.mu.Unlock()
	for _, n := range notes {
		if n.redirect == 0 {
			n.t.push.send(invalidation(n.name))
		} else {
			tr.redirected(n.t, n.redirect, n.name)
		}
	}
}

// redirected tells connection id of the change of name, which t tracks:
// as Redis does, nothing is sent while id is not subscribed to
// invalidateChannel, and a RESP3 t hears when id has gone.
func (tr *tracking) redirected(t *tracker, id int64, name string) {
	v, ok := tr.conns.Load(id)
	if !ok {
		if t.push != nil {
			t.push.send(redirectBroken(id))
		}
		return
	}
	rt := v.(*redirectTarget)
	if rt == nil {
		return
	}
	head := invalidatePush
	if rt.sub.proto.Load() == 2 {
		head = invalidateMessage
	}
	rt.sub.mu.Lock()
	defer rt.sub.mu.Unlock()
	if rt.sp.live {
		rt.sub.push.send(invalidated(head, name))
	}
}

// The heads of an invalidation: a RESP3 push, and the RESP2 pub/sub
// message on invalidateChannel; the changed keys follow as an array.
const (
	invalidatePush    = ">2\r\n$10\r\ninvalidate\r\n"
	invalidateMessage = "*3\r\n$7\r\nmessage\r\n$20\r\n" + invalidateChannel + "\r\n"
)

// invalidation is the RESP3 push that tells of key's change.
func invalidation(key string) []byte { return invalidated(invalidatePush, key) }

// invalidated is head followed by the array of key alone.
func invalidated(head, key string) []byte {
	b := append([]byte(head), "*1\r\n$"...)
	b = strconv.AppendInt(b, int64(len(key)), 10)
	b = append(b, "\r\n"...)
	b = append(b, key...)
	return append(b, "\r\n"...)
}

// redirectBroken is the RESP3 push that tells a tracking connection that
// the connection it redirects to has gone.
func redirectBroken(id int64) []byte {
	b := []byte(">2\r\n$21\r\ntracking-redir-broken\r\n:")
	b = strconv.AppendInt(b, id, 10)
	return append(b, "\r\n"...)
}

// stop turns t off and forgets its keys.
func (tr *tracking) stop(t *tracker) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !t.on {
		return
	}
	t.on = false
	tr.on.Add(-1)
	delete(tr.bcast, t)
	for key, m := range tr.keys {
		delete(m, t)
		if len(m) == 0 {
			delete(tr.keys, key)
		}
	}
}

// start turns t on with the options given, replacing earlier ones.
func (tr *tracking) start(t *tracker, opt trackingOptions) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !t.on {
		tr.on.Add(1)
	}
	t.on, t.bcast, t.optin, t.optout, t.noloop, t.prefixes, t.redirect = true, opt.bcast, opt.optin, opt.optout, opt.noloop, opt.prefixes, opt.redirect
	if t.bcast {
		tr.bcast[t] = struct{}{}
	} else {
		delete(tr.bcast, t)
	}
}

// ownChange reports whether a change of key is the connection's own: one
// of its writes on key is in flight, or, for a release notice, ended
// lately (the first notice after it is taken to be its own).
func (t *tracker) ownChange(key string, notice bool) bool {
	t.busyMu.Lock()
	defer t.busyMu.Unlock()
	if t.busy[key] > 0 {
		return true
	}
	if at, ok := t.written[key]; notice && ok {
		delete(t.written, key)
		return time.Since(at) < ownNoticeWindow
	}
	return false
}

// ownWrite marks keys as written by t's connection until the returned
// function is called: NOLOOP's.
func (t *tracker) ownWrite(keys []string) func() {
	t.busyMu.Lock()
	if t.busy == nil {
		t.busy = map[string]int{}
	}
	for _, k := range keys {
		t.busy[k]++
	}
	t.busyMu.Unlock()
	return func() {
		t.busyMu.Lock()
		if t.written == nil {
			t.written = map[string]time.Time{}
		}
		now := time.Now()
		for k, at := range t.written {
			if now.Sub(at) >= ownNoticeWindow {
				delete(t.written, k)
			}
		}
		for _, k := range keys {
			if t.busy[k]--; t.busy[k] <= 0 {
				delete(t.busy, k)
			}
			t.written[k] = now
		}
		t.busyMu.Unlock()
	}
}

// trackingOptions are CLIENT TRACKING ON's.
type trackingOptions struct {
	bcast, optin, optout, noloop bool
	prefixes                     []trackedPrefix
	redirect                     int64
}

// handleClientTracking serves CLIENT TRACKING ON|OFF [REDIRECT id]
// [BCAST] [PREFIX p ...] [OPTIN] [OPTOUT] [NOLOOP].
func (s *Server) handleClientTracking(conn redcon.Conn, cmd redcon.Command) {
	args := cmd.Args[2:]
	on := strings.EqualFold(string(args[0]), "on")
	if !on && !strings.EqualFold(string(args[0]), "off") {
		s.writeError(conn, errSyntax)
		return
	}
	var opt trackingOptions
	var prefixes []string
	for i := 1; i < len(args); i++ {
		switch strings.ToUpper(string(args[i])) {
		case "BCAST":
			opt.bcast = true
		case "OPTIN":
			opt.optin = true
		case "OPTOUT":
			opt.optout = true
		case "NOLOOP":
			opt.noloop = true
		case "PREFIX":
			if i++; i == len(args) {
				s.writeError(conn, errSyntax)
				return
			}
			prefixes = append(prefixes, string(args[i]))
		case "REDIRECT":
			if i++; i == len(args) {
				s.writeError(conn, errSyntax)
				return
			}
			id, err := strconv.ParseInt(string(args[i]), 10, 64)
			if err != nil {
				s.writeError(conn, errNotInteger)
				return
			}
			opt.redirect = id
		default:
			s.writeError(conn, errSyntax)
			return
		}
	}
	st := state(conn)
	c, isClient := conn.(*client)
	switch {
	case !on:
		if st.tracker != nil {
			s.tracking.stop(st.tracker)
		}
		conn.WriteString("OK")
		return
	case len(prefixes) > 0 && !opt.bcast:
		s.writeError(conn, errorf("ERR PREFIX option requires BCAST mode to be enabled"))
		return
	case opt.optin && opt.optout:
		s.writeError(conn, errorf("ERR You can't use both OPTIN and OPTOUT"))
		return
	case opt.bcast && (opt.optin || opt.optout):
		s.writeError(conn, errorf("ERR OPTIN and OPTOUT are not compatible with BCAST"))
		return
	case !isClient:
		s.writeError(conn, errorf("ERR CLIENT TRACKING is not served on this connection"))
		return
	case opt.redirect != 0 && !s.tracking.exists(opt.redirect):
		s.writeError(conn, errorf("ERR The client ID you want redirect to does not exist"))
		return
	case st.proto != 3 && opt.redirect == 0:
		// Redis accepts it and never tells anything.
		s.writeError(conn, errorf("ERR lockproxy serves CLIENT TRACKING in RESP2 with REDIRECT only (to a connection subscribed to %s), or in RESP3 (HELLO 3), where invalidations are push messages", invalidateChannel))
		return
	}
	ks := space(conn)
	if opt.bcast {
		if len(prefixes) == 0 {
			prefixes = []string{""}
		}
		for _, p := range prefixes {
			opt.prefixes = append(opt.prefixes, trackedPrefix{full: ks.prefix + p, space: ks.prefix})
		}
	}
	if st.tracker == nil {
		st.tracker = &tracker{}
	}
	if st.proto == 3 && st.tracker.push == nil {
		if c.push == nil {
			c.push = newPushWriter(c.conn, c.writeTimeout)
		}
		st.tracker.push = c.push
	}
	s.tracking.start(st.tracker, opt)
	s.followReleases()
	conn.WriteString("OK")
}

// followReleases has every release and deletion through any proxy
// invalidate its key, from the first CLIENT TRACKING ON on.
func (s *Server) followReleases() {
	tr := s.tracking
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.watching {
		return
	}
	tr.watching = true
	s.watcher.Releases("*", func(key, _ string) { tr.noticed(key) })
}

// handleClientCaching serves CLIENT CACHING YES|NO: whether the next
// command's reads are tracked, in OPTIN (YES) or OPTOUT (NO) mode.
func (s *Server) handleClientCaching(conn redcon.Conn, cmd redcon.Command) {
	t := state(conn).tracker
	yes := strings.EqualFold(string(cmd.Args[2]), "yes")
	switch {
	case !yes && !strings.EqualFold(string(cmd.Args[2]), "no"):
		s.writeError(conn, errSyntax)
	case t == nil || !t.on || !t.optin && !t.optout:
		s.writeError(conn, errorf("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"))
	case yes && !t.optin:
		s.writeError(conn, errorf("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."))
	case !yes && !t.optout:
		s.writeError(conn, errorf("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."))
	default:
		if yes {
			t.caching.Store(1)
		} else {
			t.caching.Store(-1)
		}
		conn.WriteString("OK")
	}
}

// handleClientGetRedir serves CLIENT GETREDIR: -1 when tracking is off,
// else the connection it redirects to, 0 for none.
func (s *Server) handleClientGetRedir(conn redcon.Conn, _ redcon.Command) {
	if t := state(conn).tracker; t != nil && t.on {
		conn.WriteInt64(t.redirect)
		return
	}
	conn.WriteInt(-1)
}

// handleClientTrackingInfo serves CLIENT TRACKINGINFO, as Redis's.
func (s *Server) handleClientTrackingInfo(conn redcon.Conn, _ redcon.Command) {
	t := state(conn).tracker
	flags := []string{"off"}
	redirect := int64(-1)
	var prefixes []string
	if t != nil && t.on {
		flags, redirect = []string{"on"}, t.redirect
		if redirect != 0 && !s.tracking.exists(redirect) {
			flags = append(flags, "broken_redirect")
		}
		for cond, flag := range map[*bool]string{&t.bcast: "bcast", &t.optin: "optin", &t.optout: "optout", &t.noloop: "noloop"} {
			if *cond {
				flags = append(flags, flag)
			}
		}
		switch t.caching.Load() {
		case 1:
			flags = append(flags, "caching-yes")
		case -1:
			flags = append(flags, "caching-no")
		}
		for _, p := range t.prefixes {
			prefixes = append(prefixes, p.full[len(p.space):])
		}
	}
	writeMapLen(conn, 3)
	conn.WriteBulkString("flags")
	conn.WriteArray(len(flags))
	for _, f := range flags {
		conn.WriteBulkString(f)
	}
	conn.WriteBulkString("redirect")
	conn.WriteInt64(redirect)
	conn.WriteBulkString("prefixes")
	conn.WriteArray(len(prefixes))
	for _, p := range prefixes {
		conn.WriteBulkString(p)
	}
}

// trackCommand registers the keys a tracking connection's command reads,
// before it runs (an invalidation may then come before its reply, never
// be lost after it), and marks a NOLOOP connection's writes as its own;
// the returned function ends what it began. CLIENT CACHING's flag is for
// one command: MULTI passes it on to EXEC.
func (s *Server) trackCommand(conn redcon.Conn, t *tracker, c *command, args [][]byte) (done func()) {
	done = func() {}
	if !t.on {
		return done
	}
	switch c.name {
	case "client|caching", "multi":
		return done
	}
	caching := t.caching.Swap(0)
	if c.name == "exec" {
		if !inMulti(state(conn)) {
			return done
		}
		for _, q := range state(conn).tx.queued {
			if qc, err := s.lookup(q); err == nil {
				s.trackKeys(conn, t, qc, q, caching)
			}
		}
		return done
	}
	keys := s.trackKeys(conn, t, c, args, caching)
	if t.noloop && len(keys) > 0 && !slices.Contains(c.flags, "readonly") {
		// A script's own write is its own too.
		return t.ownWrite(keys)
	}
	return done
}

// trackKeys registers the keys of one read of conn where its mode and
// caching flag say so, and returns the keys of c in the Locker's space.
func (s *Server) trackKeys(conn redcon.Conn, t *tracker, c *command, args [][]byte, caching int32) []string {
	names := commandKeys(c, args)
	if len(names) == 0 {
		return nil
	}
	ks := space(conn)
	keys := make([]string, 0, len(names))
	for _, n := range names {
		if full, err := ks.key(string(n)); err == nil {
			keys = append(keys, full)
		}
	}
	// A lock script reads its keys before it writes them (compare and
	// delete, compare and extend), and Redis tracks what scripts read: a
	// holder that extends hears of its own extension, which rueidislock
	// waits for.
	reads := slices.Contains(c.flags, "readonly") || slices.Contains(c.flags, "movablekeys")
	tracked := reads && !t.bcast &&
		(t.optin && caching == 1 || t.optout && caching != -1 || !t.optin && !t.optout)
	if tracked {
		for i, full := range keys {
			s.tracking.register(t, full, string(names[i]))
		}
	}
	return keys
}

// trackedLocker tells the tracking connections of every key that a call
// through it changed: a lock taken or extended, released, deleted, or
// given a TTL, and a hash lock renewed.
type trackedLocker struct {
	locks    Locker
	tracking *tracking
}

var _ Locker = (*trackedLocker)(nil)

func (l *trackedLocker) changed(keys ...string) {
	for _, k := range keys {
		l.tracking.invalidate(k)
	}
}

func (l *trackedLocker) Lock(ctx context.Context, req quorum.Lock) (quorum.Result, error) {
	res, err := l.locks.Lock(ctx, req)
	if err == nil {
		l.changed(req.Keys...)
	}
	return res, err
}

func (l *trackedLocker) Unlock(ctx context.Context, req quorum.Unlock) (quorum.Result, error) {
	res, err := l.locks.Unlock(ctx, req)
	if err == nil {
		l.changed(req.Keys...)
	}
	return res, err
}

func (l *trackedLocker) Read(ctx context.Context, req quorum.Read) (quorum.Reading, error) {
	return l.locks.Read(ctx, req)
}

func (l *trackedLocker) Write(ctx context.Context, req quorum.Write) (bool, error) {
	ok, err := l.locks.Write(ctx, req)
	if ok && err == nil {
		l.changed(req.Key)
	}
	return ok, err
}

// Renew tells of the hash locks renewed (Redisson's watchdog: a client's
// extension). The session locks' renewals are the proxy's own upkeep of
// locks whose holders asked for none, and are not told.
func (l *trackedLocker) Renew(ctx context.Context, req quorum.Renewal) []quorum.Renewed {
	out := l.locks.Renew(ctx, req)
	if req.Hash {
		for i, renewed := range out {
			if renewed.Err == nil {
				l.changed(req.Locks[i].Key)
			}
		}
	}
	return out
}

func (l *trackedLocker) MaxTTL() time.Duration { return l.locks.MaxTTL() }
