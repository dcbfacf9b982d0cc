package quorum

import (
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Watching a pattern of notices on every backend: the releases that wake
// waiters on other proxies (Releases), and the messages one engine relays
// to the others (messages.go). Each backend tells each notice once; a
// watch hears the N copies as one, and tells its callers once enough
// backends told it that what it announces has landed on a quorum.

// watch is the callers of Releases (or Relayed) with one backend pattern.
type watch struct {
	fns  map[int]func(name, payload string)
	next int
	// seen are the notices heard lately, by id: their copies from the
	// other backends are not news. A release's id is its own (a relayed
	// message's may repeat), so one backend telling an id twice is two
	// notices: a backend tells each one once.
	seen map[string]*sighting
	// copies is how many backends must tell a notice before its callers
	// hear it (Releases: a quorum, so that a waiter woken by it finds the
	// release landed on a quorum, not on the first backend to tell it).
	// Past one, they wait for the other backends that count and carry the
	// pattern too, up to straggle after that (Releases).
	copies int
	// subscribed is closed when a quorum of backends confirmed the
	// pattern; confirmed says which.
	subscribed chan struct{}
	confirmed  map[int]bool
	// mark is the mark that has the backends publish what it watches
	// (lua/notice.lua), "" for none; marked is its writing.
	mark   string
	marked marking
}

// Releases calls fn(key, token) for each release or delete of a key that
// matches pattern (Redis's glob, as PSUBSCRIBE takes it) through any
// engine, once per release however many backends tell it, until stop is
// called. token is the released token, "" for a delete. The engine keeps
// one pattern subscription per backend while anyone watches pattern. It
// returns once a quorum of backends carry the pattern, or after the
// backend timeout when too few answer, so that a release made after it
// returns is heard while a quorum of backends is up. fn is called from the
// engine's goroutines and must not block; it may be called once more
// while stop runs.
//
// fn hears a release once a quorum of backends told it, that is once it
// landed on a quorum: a client woken by the first copy would try while the
// holder still had a quorum, be refused, and wait out the holder's whole
// lease (Redisson does), its wake-up spent. A release that reached fewer
// (its key had expired on the others) is not told: its waiters were free
// to take the key already, at their own timers.
//
// Past a quorum, fn hears it once every backend that counts told it too,
// or a backend timeout after the quorum's copy, whichever comes first. A
// release is answered at a quorum, and under load its last backends apply
// it later: a waiter woken at once would take the lock where the release
// had landed and be refused where it had not, and hold it on a bare
// quorum, which one backend's restart then leaves undecidable (its renewal
// and its release fail, and its waiters sleep out its lease). Woken once
// the release is everywhere, it takes the lock everywhere.
func (e *Engine) Releases(pattern string, fn func(key, token string)) (stop func()) {
	return e.watchPattern(releasedPrefix+pattern, e.quorum, releasesMark(pattern), fn)
}

// releasesMark is the mark that has the backends publish the releases of
// the keys pattern matches: one key's waiting mark where it names one key
// (a Redisson client waiting), else the mark of every key.
func releasesMark(pattern string) string {
	if strings.ContainsAny(pattern, `*?[\`) {
		return listeningKey
	}
	return waitingPrefix + pattern
}

// watchPattern adds fn to the callers of backendPattern, subscribing the
// backends to it if fn is the first, and waits (at most the backend
// timeout) until a quorum of them carry it, and until mark ("" none) is
// written on every backend that answers. fn hears each notice once copies
// backends told it.
func (e *Engine) watchPattern(backendPattern string, copies int, mark string, fn func(name, payload string)) (stop func()) {
	w := &e.waits
	w.mu.Lock()
	wt := w.watches[backendPattern]
	if wt == nil {
		wt = &watch{fns: map[int]func(string, string){}, seen: map[string]*sighting{}, copies: copies,
			subscribed: make(chan struct{}), confirmed: map[int]bool{}, mark: mark}
		w.watches[backendPattern] = wt
		for _, s := range w.subs {
			if s != nil {
				s.PSubscribe(backendPattern)
			}
		}
	}
	id := wt.next
	wt.next++
	wt.fns[id] = fn
	w.mu.Unlock()
	marked := wt.marked.start(e, mark)
	settle := time.NewTimer(e.cfg.NodeTimeout)
	select {
	case <-wt.subscribed:
	case <-settle.C:
	}
	settle.Stop()
	<-marked
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			delete(wt.fns, id)
			if len(wt.fns) > 0 || w.watches[backendPattern] != wt {
				return
			}
			delete(w.watches, backendPattern)
			for _, s := range w.subs {
				if s != nil {
					s.PUnsubscribe(backendPattern)
				}
			}
		})
	}
}

// confirmedPattern hears that backend i carries a watched pattern; false
// when pattern is not one.
func (w *waits) confirmedPattern(i int, pattern string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt := w.watches[pattern]
	if wt == nil {
		return false
	}
	if !wt.confirmed[i] {
		wt.confirmed[i] = true
		if len(wt.confirmed) == w.quorum {
			close(wt.subscribed)
		}
	}
	return true
}

// sighting is when a notice was first heard, and which backends told it
// since.
type sighting struct {
	at   time.Time
	from map[int]bool
	told bool            // the callers heard it
	late clockwork.Timer // tells the callers at the end of the straggle
}

// watched hears backend from's copy of a notice on a watched pattern:
// name and payload for the callers, id the same in every copy.
func (w *waits) watched(from int, pattern, id, name, payload string) {
	counting := w.countingNow() // before w.mu: it takes the backends' locks
	w.mu.Lock()
	wt := w.watches[pattern]
	if wt == nil {
		w.mu.Unlock()
		return
	}
	now := w.clock.Now()
	s := wt.seen[id]
	if s != nil && now.Sub(s.at) < noticeDedupe && !s.from[from] {
		s.from[from] = true // another backend's copy
	} else {
		for k, old := range wt.seen {
			if now.Sub(old.at) >= noticeDedupe {
				delete(wt.seen, k)
			}
		}
		s = &sighting{at: now, from: map[int]bool{from: true}}
		wt.seen[id] = s
	}
	if s.told || len(s.from) < wt.copies {
		w.mu.Unlock()
		return
	}
	if wt.copies > 1 && !coveredBy(s.from, carrying(counting, wt.confirmed)) {
		if s.late == nil {
			s.late = w.clock.AfterFunc(w.straggle, func() { w.tell(wt, s, name, payload) })
		}
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.tell(wt, s, name, payload)
}

func (w *waits) countingNow() []bool {
	if w.counting == nil {
		return nil
	}
	return w.counting()
}

// tell gives a notice to wt's callers, once.
func (w *waits) tell(wt *watch, s *sighting, name, payload string) {
	w.mu.Lock()
	if s.told {
		w.mu.Unlock()
		return
	}
	s.told = true
	if s.late != nil {
		s.late.Stop()
	}
	fns := make([]func(string, string), 0, len(wt.fns))
	for _, fn := range wt.fns {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(name, payload)
	}
}

// carrying are the backends that count (counting) and confirmed a channel
// or pattern (confirmed): those a notice on it is expected from.
func carrying(counting []bool, confirmed map[int]bool) []bool {
	out := make([]bool, len(counting))
	for i, c := range counting {
		out[i] = c && confirmed[i]
	}
	return out
}

// coveredBy reports whether every backend expected told a notice.
func coveredBy(from map[int]bool, expected []bool) bool {
	for i, c := range expected {
		if c && !from[i] {
			return false
		}
	}
	return true
}
