package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/tidwall/redcon"
)

// Session-bound locks. A client that takes a lock with no TTL (SET k v NX,
// as redis-py's Lock(timeout=None) and python-redis-lock's expire=None
// do; SETNX with no PEXPIRE after it; LOCK.ACQUIRE k v SESSION; or any
// lock under a session prefix or of a session user) asks for a lock that
// lives as long as it does. On one Redis that lock never expires, and is
// stuck once its holder dies. Here it lives on the backends with a short
// lease, which the proxy renews, at a third of the lease, for as long as
// the connection that took it stays open, and releases when that
// connection closes, goes idle past a limit, or has held it for the hard
// cap. A proxy that dies stops renewing: the lock then expires within one
// lease, which is safe.
//
// A renewal that a quorum refuses, or none reaches before the lock's
// validity runs out, loses the lock. That is never silent: the lock is
// rolled back, the holder's next command on that connection is answered
// with -LOCKLOST instead of being run, a RESP3 connection also gets a push
// message at once, and a metric and a log line count it. The loss is
// declared when the validity of the last renewal runs out, which is before
// any other client can be granted the lock (its keys outlive the validity
// on the backends that renewed them): no client is granted the lock while
// its holder has not yet been told.

// SessionConfig configures session-bound locks.
type SessionConfig struct {
	// Lease is the TTL a session lock has on the backends, renewed at a
	// third of it: how long a lock outlives a proxy that died. At most
	// max_ttl. Default: 10s.
	Lease time.Duration
	// MaxHold is the longest a session lock is held: then it is released,
	// and its holder told, as the Redlock specification asks a lock to be
	// bounded. Negative: no bound. Default: 1h.
	MaxHold time.Duration
	// IdleTimeout releases a connection's session locks when it has sent
	// no command for that long (the holder told on its next one): a
	// holder that hangs with its socket open. Default: none (0), since a
	// holder may work for long without talking to the proxy; TCP
	// keepalive notices a holder whose host is gone.
	IdleTimeout time.Duration
	// Prefixes make every lock whose key starts with one of them (before
	// a user's key prefix) session-bound, whatever TTL it is asked with;
	// User.Session does so for every lock of a user. Default: none.
	Prefixes []string
}

func (c SessionConfig) withDefaults() SessionConfig {
	if c.Lease == 0 {
		c.Lease = 10 * time.Second
	}
	if c.MaxHold == 0 {
		c.MaxHold = time.Hour
	}
	return c
}

// Why a session lock ended other than by its holder's release, as
// -LOCKLOST, the push message and lockproxy_session_lost_total name it.
const (
	lostNoQuorum  = "no_quorum" // no renewal reached a quorum before the validity ran out
	lostNotHeld   = "not_held"  // a quorum answered that the token no longer holds the key
	lostMaxHold   = "max_hold"  // held for session_max_hold
	lostIdle      = "idle"      // the connection sent nothing for session_idle_timeout
	numLostCauses = 4
)

var lostCauses = [numLostCauses]string{lostNoQuorum, lostNotHeld, lostMaxHold, lostIdle}

var lostTexts = map[string]string{
	lostNoQuorum: "its renewals reached no quorum of backends before its validity ran out",
	lostNotHeld:  "a quorum of backends no longer holds it for this token",
	lostMaxHold:  "it was held for session_max_hold",
	lostIdle:     "the connection sent nothing for session_idle_timeout",
}

// sessionLock is one session-bound lock.
type sessionLock struct {
	held      quorum.Held // the key as the Locker has it (the user's prefix in front)
	clientKey string      // the key as its holder named it
	owner     *connSessions
	taken     time.Time
	// unexpiring: asked without a TTL, where one Redis would answer TTL
	// -1; a session prefix's or user's lock asked with one is not.
	unexpiring bool
	// validUntil is when the lock stops being safe to rely on, in
	// nanoseconds of sessions.since: a command of its holder answered after
	// it is told the loss, whether or not the renewal loop has looked yet.
	validUntil atomic.Int64
	// Under sessions.mu:
	renewAt  time.Time
	renewing bool // a renewal is in flight
}

// connSessions is one connection's session locks and the losses it has
// not been told of yet.
type connSessions struct {
	m          *sessions
	push       *pushWriter // RESP3: losses are pushed at once; nil otherwise
	lastActive atomic.Int64
	hasLost    atomic.Bool // a loss waits to be told: checked per command

	mu    sync.Mutex // under sessions.mu when both are taken
	locks map[*sessionLock]struct{}
	lost  []*sessionLock
	cause []string
}

// sessions renews the server's session locks.
type sessions struct {
	cfg   SessionConfig
	locks Locker // for renewals and releases: below the key prefix
	obs   Observer
	log   *slog.Logger
	ctx   context.Context

	base time.Time // of since
	mu   sync.Mutex
	held map[quorum.Held]*sessionLock
	// unexpiring are the keys of held's locks asked without a TTL.
	unexpiring map[string]*sessionLock
	// count is len(held), read without mu by released, which every
	// release of every connection calls.
	count atomic.Int64
	wake  chan struct{}

	releases sync.WaitGroup // rollbacks and releases in flight
	stopped  chan struct{}  // closed when run has ended

	// Counters for INFO and metrics.
	renewals    atomic.Int64
	renewalLags atomic.Int64 // renewals that started later than due by a third of the lease or more
	lostBy      [numLostCauses]atomic.Int64
}

// newSessions returns the session locks of a server, renewed and released
// through locks (whose keys have the user's prefix in front already), the
// renewals' lags told to obs if not nil, until ctx ends.
func newSessions(ctx context.Context, cfg SessionConfig, locks Locker, obs Observer, log *slog.Logger) *sessions {
	m := &sessions{cfg: cfg.withDefaults(), locks: locks, obs: obs, log: log, ctx: ctx, base: time.Now(),
		held: map[quorum.Held]*sessionLock{}, unexpiring: map[string]*sessionLock{}, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	go m.run()
	return m
}

// since is t on the monotonic clock of validUntil.
func (m *sessions) since(t time.Time) int64 { return int64(t.Sub(m.base)) }

// tick is how often the renewal loop looks at the locks: a thirtieth of
// the lease, so that renewals start at most that much late and the locks
// due together go in few batches.
func (m *sessions) tick() time.Duration { return max(m.cfg.Lease/30, 10*time.Millisecond) }

// takesSession reports whether the command would take a session-bound
// lock. Such a command is not started ahead of its turn (pipeline.go): the
// lock is recorded in the connection's state, which only the connection's
// goroutine touches.
func (s *Server) takesSession(conn redcon.Conn, name string, args [][]byte) bool {
	switch name {
	case "setnx":
		return true
	case "set":
		req, err := parseSet(args)
		return err == nil && !req.extend && (req.ttl == 0 || s.sessionBound(conn, req.key))
	}
	return false
}

// sessionBound reports whether a lock on key (as the client named it) is
// session-bound whatever TTL it was asked with.
func (s *Server) sessionBound(conn redcon.Conn, key string) bool {
	if u := state(conn).user; u != nil && u.session {
		return true
	}
	for _, p := range s.sessions.cfg.Prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// acquireSession takes key for token as a session-bound lock for conn,
// with wait as Lock's Wait; unexpiring when it was asked without a TTL.
// The Result is the acquisition's.
func (s *Server) acquireSession(ctx context.Context, conn redcon.Conn, key, token string, wait time.Duration, unexpiring bool) (quorum.Result, error) {
	m := s.sessions
	ks := space(conn)
	full, err := ks.key(key)
	if err != nil {
		return quorum.Result{}, err
	}
	start := time.Now()
	r, err := ks.Lock(ctx, quorum.Lock{Op: quorum.OpAcquire, Keys: []string{key}, Token: token, TTL: m.cfg.Lease, Wait: wait})
	if err != nil {
		return r, err
	}
	held := quorum.Held{Key: full, Token: token}
	if wait != 0 {
		// The validity counts from the start of the attempt that took the
		// lock, which a wait hides: renewed once at a known start, the lock
		// is not lost at once for the time it waited.
		start = time.Now()
		renewed := m.locks.Renew(ctx, quorum.Renewal{Locks: []quorum.Held{held}, TTL: m.cfg.Lease})[0]
		if renewed.Err != nil {
			m.release(&sessionLock{held: held, clientKey: key})
			if errors.Is(renewed.Err, quorum.ErrNotHeld) {
				return quorum.Result{}, quorum.ErrNotAcquired
			}
			return quorum.Result{}, renewed.Err
		}
		r.Validity = renewed.Validity
	}
	owner := s.connSessions(conn)
	l := &sessionLock{held: held, clientKey: key, owner: owner, taken: start, unexpiring: unexpiring}
	m.mu.Lock()
	// Validity counts from the decision, a little after start: from start
	// is conservative.
	l.validUntil.Store(m.since(start.Add(r.Validity)))
	l.renewAt = time.Now().Add(m.cfg.Lease / 3)
	if old := m.held[l.held]; old != nil {
		m.dropLocked(old) // the same token took the key again: one lock
	}
	m.held[l.held] = l
	if unexpiring {
		m.unexpiring[full] = l
	}
	m.count.Store(int64(len(m.held)))
	owner.mu.Lock()
	owner.locks[l] = struct{}{}
	owner.mu.Unlock()
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
	return r, nil
}

// connSessions returns conn's session state, made on its first session
// lock. A RESP3 connection's output goes through a pushWriter from then
// on, so that a loss can be pushed while the connection waits for its
// client's next command.
func (s *Server) connSessions(conn redcon.Conn) *connSessions {
	if rb, ok := conn.(*replyBuffer); ok {
		// A command of MULTI, run by EXEC on the connection's goroutine
		// with a copy of its state: the lock is the connection's.
		cs := s.connSessions(rb.delegate.Conn)
		rb.state.sessions = cs
		return cs
	}
	st := state(conn)
	if st.sessions != nil {
		return st.sessions
	}
	cs := &connSessions{m: s.sessions, locks: map[*sessionLock]struct{}{}}
	cs.lastActive.Store(time.Now().UnixNano())
	if c, ok := conn.(*client); ok && st.proto == 3 {
		if c.push == nil {
			c.push = newPushWriter(c.conn, c.writeTimeout)
		}
		cs.push = c.push
	}
	st.sessions = cs
	return cs
}

// dropLocked forgets l without releasing it; m.mu is held.
func (m *sessions) dropLocked(l *sessionLock) {
	if m.held[l.held] == l {
		delete(m.held, l.held)
		m.count.Store(int64(len(m.held)))
	}
	if m.unexpiring[l.held.Key] == l {
		delete(m.unexpiring, l.held.Key)
	}
	l.owner.mu.Lock()
	delete(l.owner.locks, l)
	l.owner.mu.Unlock()
}

// unexpiringBy is the token of the session lock of this proxy on key (the
// Locker's, with the user's prefix) that was asked without a TTL, if
// there is one: TTL and PTTL answer -1 for it, as one Redis does, though
// its lease runs on the backends (through another proxy: the lease).
func (m *sessions) unexpiringBy(key string) (token string, ok bool) {
	if m == nil || m.count.Load() == 0 {
		return "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.unexpiring[key]; l != nil {
		return l.held.Token, true
	}
	return "", false
}

// released is told of every release or deletion of key that a quorum
// carried out, through any connection of this proxy (sessionLocker): a
// session lock released by its holder is one the proxy stops renewing.
// token is empty for a deletion whoever held the key.
func (m *sessions) released(key, token string) {
	if m.count.Load() == 0 {
		return // no session locks: no lock to take on every release
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if token != "" {
		if l := m.held[quorum.Held{Key: key, Token: token}]; l != nil {
			m.dropLocked(l)
		}
		return
	}
	for h, l := range m.held {
		if h.Key == key {
			m.dropLocked(l)
		}
	}
}

// closed releases a closed connection's session locks.
func (m *sessions) closed(cs *connSessions) {
	m.mu.Lock()
	cs.mu.Lock()
	var gone []*sessionLock
	for l := range cs.locks {
		gone = append(gone, l)
	}
	cs.mu.Unlock()
	for _, l := range gone {
		m.dropLocked(l)
	}
	m.mu.Unlock()
	for _, l := range gone {
		m.release(l)
	}
}

// release deletes l on the backends where its token still holds it, in
// the background; Shutdown waits for it.
func (m *sessions) release(l *sessionLock) {
	m.releases.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), m.cfg.Lease)
		defer cancel()
		_, err := m.locks.Unlock(ctx, quorum.Unlock{Op: quorum.OpRelease, Keys: []string{l.held.Key}, Token: l.held.Token})
		if err != nil && !errors.Is(err, quorum.ErrNotHeld) {
			m.log.Warn("session lock not released; it expires within its lease", "key", l.clientKey, "err", err)
		}
	})
}

// run renews the session locks as they fall due, and ends the ones whose
// time is up, until the server's context ends.
func (m *sessions) run() {
	defer close(m.stopped)
	timer := time.NewTimer(m.tick())
	defer timer.Stop()
	for {
		if m.count.Load() == 0 {
			select {
			case <-m.ctx.Done():
				return
			case <-m.wake:
			}
		}
		timer.Reset(m.tick())
		select {
		case <-m.ctx.Done():
			return
		case <-timer.C:
		}
		m.step(time.Now())
	}
}

// step ends the locks whose time is up and starts the renewals due.
func (m *sessions) step(now time.Time) {
	var due, lost []*sessionLock
	var causes []string
	m.mu.Lock()
	for _, l := range m.held {
		cause := ""
		switch {
		case m.since(now) >= l.validUntil.Load():
			cause = lostNoQuorum
		case m.cfg.MaxHold > 0 && now.Sub(l.taken) >= m.cfg.MaxHold:
			cause = lostMaxHold
		case m.cfg.IdleTimeout > 0 && now.Sub(time.Unix(0, l.owner.lastActive.Load())) >= m.cfg.IdleTimeout:
			cause = lostIdle
		case !l.renewing && !now.Before(l.renewAt):
			if late := now.Sub(l.renewAt); late >= m.cfg.Lease/3 {
				m.renewalLags.Add(1)
			}
			if m.obs != nil {
				m.obs.SessionRenewalLag(now.Sub(l.renewAt))
			}
			l.renewing = true
			due = append(due, l)
		}
		if cause != "" {
			lost, causes = append(lost, l), append(causes, cause)
		}
	}
	for _, l := range lost {
		m.dropLocked(l)
	}
	m.mu.Unlock()
	for i, l := range lost {
		m.lose(l, causes[i], true)
	}
	if len(due) > 0 {
		m.releases.Go(func() { m.renew(due) })
	}
}

// renew renews due, and loses the locks a quorum refused.
func (m *sessions) renew(due []*sessionLock) {
	held := make([]quorum.Held, len(due))
	for i, l := range due {
		held[i] = l.held
	}
	start := time.Now()
	out := m.locks.Renew(m.ctx, quorum.Renewal{Locks: held, TTL: m.cfg.Lease})
	m.renewals.Add(int64(len(due)))
	var lost []*sessionLock
	m.mu.Lock()
	for i, l := range due {
		l.renewing = false
		if m.held[l.held] != l {
			continue // released, or lost, meanwhile
		}
		switch r := out[i]; {
		case r.Err == nil:
			l.validUntil.Store(m.since(start.Add(r.Validity)))
			l.renewAt = start.Add(m.cfg.Lease / 3)
		case errors.Is(r.Err, quorum.ErrNotHeld):
			m.dropLocked(l)
			lost = append(lost, l)
		default:
			// Undecided: again at the next tick, until the validity runs out.
			l.renewAt = time.Now()
		}
	}
	m.mu.Unlock()
	for _, l := range lost {
		m.lose(l, lostNotHeld, false) // Renew rolled it back
	}
}

// lose tells l's holder that it lost l, and releases it when rollback is
// set.
func (m *sessions) lose(l *sessionLock, cause string, rollback bool) {
	for i, c := range lostCauses {
		if c == cause {
			m.lostBy[i].Add(1)
		}
	}
	if rollback {
		m.release(l)
	}
	m.log.Warn("session lock lost; its holder is told on its next command", "key", l.clientKey, "cause", cause,
		"held_for", time.Since(l.taken).Round(time.Millisecond))
	cs := l.owner
	cs.mu.Lock()
	cs.lost = append(cs.lost, l)
	cs.cause = append(cs.cause, cause)
	cs.hasLost.Store(true)
	cs.mu.Unlock()
	if cs.push != nil {
		cs.push.send(lostPush(l.clientKey, cause))
	}
}

// expire loses, at once, the connection's locks whose validity has run
// out: the renewal loop looks only every tick, and a command answered in
// between would let the holder believe in a lock whose keys may be about
// to expire on the backends.
func (cs *connSessions) expire(now time.Time) {
	m := cs.m
	at := m.since(now)
	cs.mu.Lock()
	var out []*sessionLock
	for l := range cs.locks {
		if at >= l.validUntil.Load() {
			out = append(out, l)
		}
	}
	cs.mu.Unlock()
	if out == nil {
		return
	}
	m.mu.Lock()
	lost := out[:0]
	for _, l := range out {
		if m.held[l.held] == l { // the loop may have taken it meanwhile
			m.dropLocked(l)
			lost = append(lost, l)
		}
	}
	m.mu.Unlock()
	for _, l := range lost {
		m.lose(l, lostNoQuorum, true)
	}
}

// lostPush is the RESP3 push message of a loss: ["locklost", key, cause].
func lostPush(key, cause string) []byte {
	b := []byte(">3\r\n$8\r\nlocklost\r\n")
	b = fmt.Appendf(b, "$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(cause), cause)
	return b
}

// tellLost answers the command with -LOCKLOST, instead of running it, when
// the connection lost a session lock it has not been told of: true then.
func (cs *connSessions) tellLost(conn redcon.Conn) bool {
	now := time.Now()
	cs.lastActive.Store(now.UnixNano())
	cs.expire(now)
	if !cs.hasLost.Load() {
		return false
	}
	cs.mu.Lock()
	lost, causes := cs.lost, cs.cause
	cs.lost, cs.cause = nil, nil
	cs.hasLost.Store(false)
	cs.mu.Unlock()
	if len(lost) == 0 {
		return false
	}
	msg := fmt.Sprintf("LOCKLOST %s: the session lock was lost (%s): %s", printable(lost[0].clientKey), causes[0], lostTexts[causes[0]])
	if len(lost) > 1 {
		msg += fmt.Sprintf("; and %d more session locks", len(lost)-1)
	}
	conn.WriteError(msg + "; this command was not run")
	return true
}

// printable is key as an error line can carry it.
func printable(key string) string {
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(key)
}

// shutdown releases every session lock, for a proxy that stops serving,
// and waits for the releases and renewals in flight (each bounded by the
// lease).
func (m *sessions) shutdown() {
	<-m.stopped
	m.mu.Lock()
	var all []*sessionLock
	for _, l := range m.held {
		all = append(all, l)
	}
	for _, l := range all {
		m.dropLocked(l)
	}
	m.mu.Unlock()
	for _, l := range all {
		m.release(l)
	}
	m.releases.Wait()
}

// SessionStats are the session locks' figures, for INFO and metrics.
type SessionStats struct {
	Held     int
	Renewals int64
	// LateRenewals are renewals that started a third of the lease or more
	// after they were due: the proxy was too busy, or paused.
	LateRenewals int64
	Lost         map[string]int64 // by cause
}

// SessionStats returns the session locks' figures now.
func (s *Server) SessionStats() SessionStats {
	m := s.sessions
	st := SessionStats{Held: int(m.count.Load()), Renewals: m.renewals.Load(), LateRenewals: m.renewalLags.Load(), Lost: map[string]int64{}}
	for i, c := range lostCauses {
		st.Lost[c] = m.lostBy[i].Load()
	}
	return st
}

// SessionLostCauses are the causes that SessionStats.Lost counts.
func SessionLostCauses() []string { return lostCauses[:] }

// sessionLocker tells the session locks of every release, deletion and
// TTL set whoever holds the key that a quorum carried out through it: a
// session lock released by its holder, or by anyone, is one the proxy
// stops renewing.
type sessionLocker struct {
	locks    Locker
	sessions *sessions
}

var _ Locker = (*sessionLocker)(nil)

func (l *sessionLocker) Lock(ctx context.Context, req quorum.Lock) (quorum.Result, error) {
	return l.locks.Lock(ctx, req)
}

func (l *sessionLocker) Unlock(ctx context.Context, req quorum.Unlock) (quorum.Result, error) {
	res, err := l.locks.Unlock(ctx, req)
	// A hash lock left with holds is still its owner's.
	if err == nil && (req.Op != quorum.OpHashRelease || res.Released) {
		for _, k := range req.Keys {
			l.sessions.released(k, req.Token)
		}
	}
	return res, err
}

func (l *sessionLocker) Read(ctx context.Context, req quorum.Read) (quorum.Reading, error) {
	return l.locks.Read(ctx, req)
}

// Write forgets a session lock deleted, or given a TTL: PEXPIRE after
// SETNX, the legacy recipe's second step, makes it an ordinary lock with
// that TTL from now on, no longer renewed.
func (l *sessionLocker) Write(ctx context.Context, req quorum.Write) (bool, error) {
	ok, err := l.locks.Write(ctx, req)
	if ok && err == nil && (req.Op == quorum.OpDelete || req.Op == quorum.OpExpire) {
		l.sessions.released(req.Key, "")
	}
	return ok, err
}

func (l *sessionLocker) Renew(ctx context.Context, req quorum.Renewal) []quorum.Renewed {
	return l.locks.Renew(ctx, req)
}

func (l *sessionLocker) MaxTTL() time.Duration { return l.locks.MaxTTL() }
