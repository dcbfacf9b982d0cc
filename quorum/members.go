package quorum

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/admit"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// One backend set, checked. Every proxy must count the same set of
// backends: two proxies counting different sets can each find a quorum
// in its own, and grant one lock twice. So each backend's data set holds a
// record of the set it is a member of (setKey: the set's epoch, its size N,
// a fingerprint of its members' addresses, and a digest of the slots it
// serves), which every script that takes or extends a lock checks
// (lua/setcheck.lua): a proxy whose set the record does not name is
// refused there, atomically with its request. A backend counts for a
// proxy only while its record names the proxy's set (admit.Counts).
//
// Who writes a record. A proxy writes its set's record only where a
// member has none (a first start, or a backend that lost its data set),
// as admit.Claims decides from what every member's record says, read
// again about every second while a member's record does not let it count.
// A new epoch is written by lockproxy adopt alone (Adopt, adopt.go): a
// proxy that merely starts with a higher epoch, or other members, writes
// nothing and counts nothing. package admit gives the argument, and its
// model checker explores it.

// setKey is the record of the backend set in each backend's data set.
const setKey = ReservedPrefix + "set"

// newBackendSet names the set of the data sets at where (host:port/db each)
// in epoch, serving what label says (Config.SetLabel).
func newBackendSet(epoch int, where []string, label string) admit.Set {
	return admit.NewSet(epoch, where, label)
}

// SetError marks a backend whose set record does not let it count toward
// this proxy's quorums: State says how.
//   - StateOtherSet: it records a newer epoch (this proxy runs an old
//     configuration) or the same epoch with other members (two
//     configurations).
//   - StateNotAdopted: it records an older epoch: this proxy's epoch has not
//     been adopted (lockproxy adopt).
//   - StateAdopting: lockproxy adopt is writing this proxy's set, and has
//     not finished.
//   - StateUnrecorded: it records no set (a new or emptied server), and this
//     proxy may not record its own there yet.
type SetError struct {
	State    State
	Recorded string // the record, "" when none
	Ours     string // the engine's set, "epoch:N:fingerprint"
}

func (e *SetError) Error() string {
	switch e.State {
	case StateNotAdopted:
		return fmt.Sprintf("the backend records an older epoch (%s) than this proxy's (%s): a new epoch counts once lockproxy adopt has written it", e.Recorded, e.Ours)
	case StateAdopting:
		return "lockproxy adopt is writing this proxy's backend set (" + e.Ours + ") and has not finished: run it again if it stopped"
	case StateUnrecorded:
		return "the backend records no backend set (a new or emptied server): this proxy records its own there once every backend answers, or a quorum records it"
	}
	return fmt.Sprintf("the backend records another backend set (%s) than this proxy's (%s): every proxy must run the same backends, and a change of them is adopted (lockproxy adopt)", e.Recorded, e.Ours)
}

// setError is why a record that relates so to set ours does not count.
func setError(rel admit.Relation, recorded string, ours admit.Set) *SetError {
	e := &SetError{Recorded: recorded, Ours: ours.Name(), State: StateOtherSet}
	switch rel {
	case admit.Older:
		e.State = StateNotAdopted
	case admit.Adopting:
		e.State = StateAdopting
	case admit.Absent:
		e.State = StateUnrecorded
	}
	return e
}

// setRefusalPrefix starts the error reply of lua/setcheck.lua.
const setRefusalPrefix = "LOCKPROXY_SET "

// setRefusal reads a script's refusal by the set check, or nil.
func setRefusal(err error, ours admit.Set) *SetError {
	if err == nil || !strings.HasPrefix(err.Error(), setRefusalPrefix) {
		return nil
	}
	recorded := strings.TrimPrefix(err.Error(), setRefusalPrefix)
	r, _ := admit.ParseRecord(recorded)
	return setError(admit.Relate(ours, r), recorded, ours)
}

// watchRecords reads every member's record again about every second, and
// at once when a greeting or a script's set check showed one that does
// not let its backend count, and records the engine's set where
// admit.Claims says so; it runs until Close. Reading them when all is
// well is what tells a proxy of an old configuration that an adopt
// finished, before any request of its own is refused; and the read of a
// backend that is down dials it, so that an idle proxy sees a backend
// come back within a second.
func (e *Engine) watchRecords() {
	defer e.running.Done()
	tick := e.clock.NewTicker(memberRound)
	defer tick.Stop()
	// A round in flight ends with the engine: Close waits for this
	// goroutine, and a hung backend must not hold a shutdown for two
	// backend timeouts.
	life, end := context.WithCancel(context.Background())
	defer end()
	go func() {
		select {
		case <-e.closed:
			end()
		case <-life.Done():
		}
	}()
	for {
		select {
		case <-e.closed:
			return
		case <-tick.Chan():
		case <-e.recordsNews:
		}
		ctx, cancel := context.WithTimeout(life, 2*e.cfg.NodeTimeout)
		e.readRecords(ctx)
		cancel()
	}
}

// memberRound is how often the records are read again, and a backend that
// is down dialled.
const memberRound = time.Second

// recordsSettled reports whether every connected member's record lets it
// count, as last read (a script's set check's refusal is a reading too).
func (e *Engine) recordsSettled() bool {
	for _, n := range e.nodes {
		if st, _ := n.pipe.Status(); st != backend.StatusUp {
			continue
		}
		n.mu.Lock()
		ok := n.relation == admit.Ours
		n.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// readRecords reads every member's record (the identity script, which
// also tells a quarantine's end), and records the engine's set where
// admit.Claims says so (lua/claim.lua, which writes only over the record
// read: a write between the read and it leaves it as it is).
func (e *Engine) readRecords(ctx context.Context) {
	if e.cfg.skipIdentity {
		return // the tests' control: no marker, no record
	}
	views := make([]admit.View, len(e.nodes))
	raws := make([]string, len(e.nodes))
	horizons := make([]horizonRead, len(e.nodes))
	var wg sync.WaitGroup
	for i, n := range e.nodes {
		wg.Go(func() {
			r, err := n.pipe.Do(ctx, e.identityCommand())
			if err != nil {
				return
			}
			id, err := parseIdentity([]backend.Reply{r})
			if err != nil || id.runID == "" || !n.learn(id) {
				return
			}
			clockOK := e.clocks.err(i) == nil
			n.mu.Lock()
			waiting := n.waitLeft() > 0
			views[i] = admit.View{Answered: true, Record: n.record, Quarantined: waiting}
			raws[i] = n.recordRaw
			n.horizonLeft = id.horizon
			horizons[i] = horizonRead{
				witness: n.relation == admit.Ours && n.record.Horizon && !waiting && !n.unseeded && clockOK,
				horizon: id.horizon,
				floor:   id.floor,
			}
			n.mu.Unlock()
		})
	}
	wg.Wait()
	// The replies arrived by now: a later time than each, which only
	// lengthens what they prove.
	e.settle(ctx, horizons, e.clock.Now())
	ours := admit.Final(e.set).String()
	claims, superseded := admit.Claims(e.set, views, e.superseded)
	if superseded && !e.superseded {
		e.cfg.Logger.Error("this proxy's backend set is superseded: a backend records another set's final record (an adopt of another configuration finished); this proxy records its set on no backend from now on: run it with the current configuration",
			"backend_set", e.set.Name())
	}
	e.superseded = superseded
	var recorded []string
	for _, i := range claims {
		n := e.nodes[i]
		r, err := n.run(ctx, claimScript, []string{setKey}, raws[i], ours)
		if done, _ := r.Integer(); err != nil || done != 1 {
			continue // read again in a round
		}
		n.setRecord(ours)
		recorded = append(recorded, n.addr)
	}
	if len(recorded) > 0 {
		e.cfg.Logger.Info("backend set recorded on backends that had none", "backend_set", e.set.Name(), "backends", strings.Join(recorded, ","))
	}
	e.noteUnrecorded(views, superseded)
}

// noteUnrecorded logs, once per change, the backends that have no record
// and that this proxy may not record its set on yet, with the backends
// that did not answer, which it waits for.
func (e *Engine) noteUnrecorded(views []admit.View, superseded bool) {
	var unrecorded, silent []string
	for i, v := range views {
		n := e.nodes[i]
		switch {
		case !v.Answered:
			silent = append(silent, n.addr+" "+cmp.Or(e.whyNot(i, n), "did not answer"))
		case !superseded && admit.Relate(e.set, v.Record) == admit.Absent:
			n.mu.Lock()
			absent := n.relation == admit.Absent
			n.mu.Unlock()
			if absent {
				unrecorded = append(unrecorded, n.addr)
			}
		}
	}
	news := strings.Join(unrecorded, ",") + "|" + strings.Join(silent, ",")
	if len(unrecorded) == 0 || news == e.unrecordedNoted {
		e.unrecordedNoted = news
		return
	}
	e.unrecordedNoted = news
	e.cfg.Logger.Warn("backends record no backend set, and this proxy records its own on them only once every backend answers (or a quorum of them records it): they do not count until then",
		"backend_set", e.set.Name(), "unrecorded", strings.Join(unrecorded, ","), "waiting_for", strings.Join(silent, ", "))
}

// identityCommand is the identity script, as greetings and readRecords
// send it.
func (e *Engine) identityCommand() *backend.Command {
	return backend.ScriptCommand(identityScript, []string{markerKey, setKey, fenceSeedKey},
		e.quarantine().Milliseconds(), e.cfg.MaxTTL.Milliseconds())
}

// quarantine is the restart quarantine: max_ttl, or none when the
// backends persist every write.
func (e *Engine) quarantine() time.Duration {
	if e.cfg.DisableRestartQuarantine {
		return 0
	}
	return e.cfg.MaxTTL
}

// askRecords asks watchRecords to read every member's record now.
func (e *Engine) askRecords() {
	select {
	case e.recordsNews <- struct{}{}:
	default:
	}
}
