package quorum

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/admit"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Changing the backend set is an operator's act: lockproxy adopt, run with
// the new configuration, writes its epoch to every backend of it (Adopt),
// and only once every one of them answers as a Redis master. The plan, and
// why it admits no second holder, is admit.PlanAdopt's; here it is carried
// out: one pass writes the pending record on every member, a reading
// checks that all still carry it, and the next pass writes the final
// record and the epoch waits. Between them adopt reads the horizons of the
// old sets' members (settle): where enough answer, the epoch wait is
// the longest lease recorded on them, not max_ttl (docs/design/horizon.md
// §4.4), and each waiting member's pending record keeps that decision for
// a re-run. Each write is
// compare-and-set against what was read, and waits for the member's
// replicas to acknowledge it (WAIT), so that a failover does not bring an
// older record back. An adopt that stops halfway leaves every member it
// wrote counting for nobody's quorum until it is run again.

// AdoptReport is what Adopt found and wrote.
type AdoptReport struct {
	// Done is set when every backend recorded the set already: nothing
	// was written.
	Done bool
	// Stopped names the sets of the old epoch that no longer take locks,
	// "epoch:N:fingerprint"; none on a first adoption.
	Stopped []string
	// Sets names the sets adopted, one per shard group.
	Sets    []string
	Members []AdoptedMember
	// DryRun is set when nothing was written, as asked.
	DryRun bool
	// Horizons tells, for each set of the old epoch, whose horizons
	// bounded the epoch waits: none where no member waits, on a dry run,
	// and when finishing an adopt cut short.
	Horizons []AdoptHorizon
	// Floor is how long the locks of an epoch before the old one may
	// still be held, as the adopt that ended it wrote (0: none): the
	// epoch waits last at least that.
	Floor time.Duration
	// Resumed is set when adopt finished one cut short; Decided then
	// tells whether its waits are those that run decided from horizons
	// (else the full ones).
	Resumed, Decided bool
}

// AdoptHorizon is what the members of one set of the old epoch told of
// their horizons once they refused the old epoch.
type AdoptHorizon struct {
	Set string // "epoch:N:fingerprint"
	// Witnesses is how many of its members answered as witnesses, Needed
	// how many must (admit.Witnesses); Longest the longest lease recorded
	// on them, from the read: the epoch wait is that and its drift
	// allowance where Witnesses >= Needed.
	Witnesses, Needed int
	Longest           time.Duration
	// NotWitnesses names its other members that the new sets keep, each
	// "address: why not".
	NotWitnesses []string
}

// AdoptedMember is one backend of the adopted sets.
type AdoptedMember struct {
	Group int // its shard group's index; 0 for a set of its own
	Addr  string
	// Before is the set it recorded before, "epoch:N:fingerprint", with
	// " (being adopted)" after it for an adopt's unfinished write; ""
	// none. After is the set it records after.
	Before, After string
	// Wait is, for a backend that waits for the old epoch's locks, how long
	// from the end of the adoption (the epoch wait); 0 when it counts as
	// soon as any quarantine of its own is over.
	Wait time.Duration
	// Replicas is how many replicas it has, Acked how many acknowledged
	// the writes (WAIT).
	Replicas, Acked int
}

// Adopt writes the backend set of each of groups (one Config per shard
// group, or one for a set of its own; Backends, BackendSetEpoch, SetLabel
// and the connection settings are read) to every one of its backends. It
// writes nothing, and says why, unless every backend answers as a Redis
// master fit to carry locks (no replica, no duplicate), no backend records
// a newer epoch or the same epoch with other members, and the new sets
// keep enough members of each set of the old epoch to stop it. With dryRun
// it plans and writes nothing. ctx bounds it all; an adopt cut short is run
// again with the same configuration.
func Adopt(ctx context.Context, groups []Config, dryRun bool) (*AdoptReport, error) {
	a, err := newAdoption(groups)
	defer a.close()
	if err != nil {
		return nil, err
	}
	if err := a.greet(ctx); err != nil {
		return nil, err
	}
	in := make([]admit.Member, len(a.members))
	for i, m := range a.members {
		rec, _ := admit.ParseRecord(m.read)
		in[i] = admit.Member{Set: m.group, Addr: m.where, Record: rec}
		m.old = rec
	}
	plan, err := admit.PlanAdopt(a.sets, in)
	var pe *admit.PlanError
	switch {
	case errors.As(err, &pe) && pe.Member >= 0:
		return nil, fmt.Errorf("nothing written: backend %s: %s", a.members[pe.Member].addr, pe.Reason)
	case err != nil:
		return nil, fmt.Errorf("nothing written: %w", err)
	}
	a.decided = make([]time.Duration, len(a.sets))
	if len(plan.Old) == 0 {
		a.resume()
	}
	report := a.report(plan, dryRun)
	if plan.Done || dryRun {
		return report, nil
	}
	// Pass 1: the pending record everywhere. Each old member refuses the
	// old epoch's proxies from its write on. Then every record is read
	// again: a member that lost the pending record while the old set was
	// still established may have been given the old record back by its
	// proxies, and is written again; once every member carries the pending
	// record (or none), no quorum of the old set is left, for good.
	write := plan.Write
	for round := 0; ; round++ {
		err = a.each(ctx, write, func(ctx context.Context, i int, m *adoptee) error {
			return m.write(ctx, claimScript, []string{setKey}, m.read, a.pending(plan, i).String())
		})
		if err != nil {
			return nil, err
		}
		if write, err = a.takenBack(ctx); err != nil {
			return nil, err
		}
		if !slices.Contains(write, true) {
			break
		}
		if round == 2 {
			return nil, errors.New("the old epoch's proxies took backends back three times while adopt wrote them: stop them, and run adopt again")
		}
	}
	if len(plan.Old) > 0 {
		if report.Horizons, report.Floor, err = a.settle(ctx, plan); err != nil {
			return nil, err
		}
	}
	// Pass 2, once every member refuses the old epoch: the final record,
	// and the epoch wait, counted from now, where the plan says.
	err = a.each(ctx, plan.Write, func(ctx context.Context, i int, m *adoptee) error {
		wait, floor := time.Duration(0), time.Duration(0)
		if plan.Wait[i] {
			wait = a.wait(m.group)
		}
		if len(plan.Old) > 0 || a.resumed {
			floor = a.wait(m.group)
		}
		return m.write(ctx, adoptScript, []string{setKey, markerKey, floorKey}, a.pending(plan, i).String(), admit.Final(a.sets[m.group]).String(), wait.Milliseconds(), floor.Milliseconds())
	})
	if err != nil {
		return nil, err
	}
	for i, m := range a.members {
		if plan.Wait[i] {
			report.Members[i].Wait = a.wait(m.group)
		}
	}
	for i, m := range a.members {
		if m.acked >= 0 {
			report.Members[i].Acked = m.acked
		}
	}
	return report, nil
}

// takenBack reads every member's record and marks those that record
// neither the pending record, nor the final one (a re-run's second pass
// reached it before), nor none, each with what it records.
func (a *adoption) takenBack(ctx context.Context) ([]bool, error) {
	back := make([]bool, len(a.members))
	err := a.each(ctx, nil, func(ctx context.Context, i int, m *adoptee) error {
		r, err := m.pipe.Do(ctx, backend.KeyCommand("GET", setKey))
		if err != nil {
			return err
		}
		raw := ""
		if !r.IsNil() {
			if raw, err = r.Bulk(); err != nil {
				return err
			}
		}
		rec, err := admit.ParseRecord(raw)
		if err != nil {
			return err
		}
		if rel := admit.Relate(a.sets[m.group], rec); rel != admit.Adopting && rel != admit.Absent && rel != admit.Ours {
			back[i], m.read = true, raw
		}
		return nil
	})
	return back, err
}

// floorKey is, on each member that adopt wrote, until when (ms, its
// clock) the locks of the epochs before the one it records may be held:
// the wait adopt decided for them, written on every member, those that
// wait or not. The horizons of a set's witnesses bound only the leases of
// that set; an epoch change that comes before the last one's old locks are
// gone waits at least until then. It expires then.
const floorKey = ReservedPrefix + "floor"

// settle decides the epoch waits from the horizons of the old sets'
// members, once each refuses the old epoch (docs/design/horizon.md §4.4),
// and writes the decision into the pending record of every member that
// waits, where a re-run finds it. It reports each old set's witnesses, and
// the longest floor (floorKey) that a member carries. A witness is a member that the new sets
// keep, that recorded its old set final and marked for horizons (an
// earlier version's proxies do not record them), whose data set was not
// lost since (its marker names its process, as at the greeting) and that
// has no wait of its own. Unlike the engine's reads after a loss, these
// need no in-flight delay: each comes after the check that saw the
// pending record on its member, whose set check refuses every old-epoch
// script from then on, so none of them runs there after the read. Where
// every old set has enough witnesses (admit.Settle), every waiting member
// waits the longest of their leases and its drift allowance, and no less
// than the longest floor, capped at the full wait; else the full wait. A
// member whose floor cannot be read may carry the only one: the full wait
// too.
func (a *adoption) settle(ctx context.Context, plan admit.Plan) ([]AdoptHorizon, time.Duration, error) {
	ids := make([]identity, len(a.members))
	read := make([]error, len(a.members))
	a.each(ctx, nil, func(ctx context.Context, i int, m *adoptee) error {
		r, err := m.pipe.Do(ctx, m.identity)
		if err == nil {
			ids[i], err = parseIdentity([]backend.Reply{r})
		}
		read[i] = err
		return nil
	})
	// The identity script tells each member's floor too.
	floor, floorRead := time.Duration(0), true
	for i, id := range ids {
		floor = max(floor, id.floor)
		floorRead = floorRead && read[i] == nil
	}
	var out []AdoptHorizon
	longest, ok := time.Duration(0), floorRead
	for _, o := range plan.Old {
		h := AdoptHorizon{Set: o.Name(), Needed: admit.Witnesses(o.N, o.Quorum())}
		var remaining []int64
		for i, m := range a.members {
			recorded := final(m.old) && m.old.Name() == o.Name()
			if !recorded && !o.Has(m.where) {
				continue
			}
			if why := a.notWitness(m, recorded, ids[i], read[i]); why != "" {
				h.NotWitnesses = append(h.NotWitnesses, m.addr+": "+why)
				continue
			}
			h.Witnesses++
			remaining = append(remaining, ids[i].horizon.Milliseconds())
		}
		ms, enough := admit.Settle(o.N, o.Quorum(), remaining)
		h.Longest = time.Duration(ms) * time.Millisecond
		ok = ok && enough
		longest = max(longest, h.Longest)
		out = append(out, h)
	}
	if !ok {
		return out, floor, nil
	}
	for g := range a.sets {
		d := longest + drift(longest, a.drifts[g])
		if floor > 0 {
			d = max(d, floor+drift(floor, a.drifts[g]))
		}
		if d < a.waits[g] {
			a.decided[g] = d
		}
	}
	// The decision, written where a re-run finds it, before any member
	// is told its wait.
	err := a.each(ctx, plan.Wait, func(ctx context.Context, i int, m *adoptee) error {
		if a.decided[m.group] == 0 {
			return nil
		}
		return m.write(ctx, claimScript, []string{setKey}, admit.PendingFor(a.sets[m.group], true).String(), a.pending(plan, i).String())
	})
	return out, floor, err
}

// notWitness is why member m, whose identity read after the check told id
// (or failed with err), is no witness for its old set; "" when it is one.
// recorded tells whether it recorded that set final when adopt planned.
func (a *adoption) notWitness(m *adoptee, recorded bool, id identity, err error) string {
	switch {
	case !recorded:
		return "it did not record the old set (its data set was lost)"
	case !m.old.Horizon:
		return "its record of the old set is not marked for horizons (an earlier version wrote it)"
	case err != nil:
		return "no answer: " + err.Error()
	case !m.intact || id.runID != m.runID || id.previous != id.runID:
		return "its data set was written by another process since the old set's locks were taken (a restart or a failover)"
	case id.left > 0:
		return fmt.Sprintf("it waits itself (%s) for %s", cmp.Or(id.reason, "restart"), id.left.Round(time.Second))
	case admit.Relate(a.sets[m.group], mustRecord(id.record)) != admit.Adopting:
		return "it does not carry the pending record"
	}
	return ""
}

// mustRecord is the record raw, already read once without error.
func mustRecord(raw string) admit.Record {
	r, _ := admit.ParseRecord(raw)
	return r
}

// resume notes whether adopt finishes one cut short (a member records the
// new set already), and takes the waits that the first run decided from
// horizons, from the pending records it wrote: each bounds the old epoch's
// leases from a read after the old epoch was refused, so it bounds them
// from any later time too.
func (a *adoption) resume() {
	for _, m := range a.members {
		rel := admit.Relate(a.sets[m.group], m.old)
		a.resumed = a.resumed || rel == admit.Adopting || rel == admit.Ours
		if rel == admit.Adopting && m.old.Decided > 0 {
			a.decided[m.group] = max(a.decided[m.group], time.Duration(m.old.Decided)*time.Millisecond)
		}
	}
}

// wait is the epoch wait of the members of set g that wait.
func (a *adoption) wait(g int) time.Duration {
	if a.decided[g] > 0 {
		return min(a.decided[g], a.waits[g])
	}
	return a.waits[g]
}

// pending is the pending record of member i: the plan's decision whether
// it waits, and how long where that was decided from horizons.
func (a *adoption) pending(plan admit.Plan, i int) admit.Record {
	g := a.members[i].group
	r := admit.PendingFor(a.sets[g], plan.Wait[i])
	if plan.Wait[i] {
		r.Decided = a.decided[g].Milliseconds()
	}
	return r
}

// final tells whether r is a record of a set, not pending.
func final(r admit.Record) bool { return r.Present && !r.Pending }

// newAdoption connects to the backends of groups, each a set of its own
// (the connections are dialled and greeted on their first command). The
// adoption is closed even when it fails.
func newAdoption(groups []Config) (*adoption, error) {
	a := &adoption{}
	for g, cfg := range groups {
		cfg = cfg.withDefaults()
		if err := cfg.validate(); err != nil {
			return a, err
		}
		where := make([]string, len(cfg.Backends))
		for i, u := range cfg.Backends {
			var err error
			if where[i], err = backend.Where(u); err != nil {
				return a, fmt.Errorf("backend %d: %w", i, err)
			}
		}
		a.sets = append(a.sets, newBackendSet(cfg.BackendSetEpoch, where, cfg.SetLabel))
		a.drifts = append(a.drifts, cfg.DriftFactor)
		a.waits = append(a.waits, cfg.MaxTTL+drift(cfg.MaxTTL, cfg.DriftFactor))
		for i, u := range cfg.Backends {
			m, err := newAdoptee(g, u, cfg)
			if err != nil {
				return a, err
			}
			m.where = where[i]
			a.members = append(a.members, m)
		}
	}
	return a, nil
}

// adoption is one run of Adopt.
type adoption struct {
	sets    []admit.Set
	waits   []time.Duration // each set's full epoch wait: max_ttl and its drift allowance
	drifts  []float64       // each set's drift_factor
	decided []time.Duration // each set's epoch wait decided from horizons; 0 none (the full one)
	resumed bool            // it finishes an adopt cut short
	members []*adoptee
}

// adoptee is one backend of an adoption.
type adoptee struct {
	group    int
	addr     string
	where    string // host:port/db, as sets list their members
	pipe     *backend.Pipe
	runID    string
	read     string       // its record as read, "" none
	old      admit.Record // its record when adopt planned
	replicas int
	acked    int // the fewest replicas that acknowledged a write

	identity *backend.Command // the identity script, as the greeting runs it
	greeting identity         // what the last greeting's identity script told
	// intact is set while every greeting found its marker naming the
	// process greeted, the same each time: its data set was not lost
	// since before adopt, so its horizon covers its leases.
	intact, greeted bool
}

func newAdoptee(group int, rawURL string, cfg Config) (*adoptee, error) {
	m := &adoptee{group: group, acked: -1}
	quarantine := cfg.MaxTTL
	if cfg.DisableRestartQuarantine {
		quarantine = 0
	}
	m.identity = backend.ScriptCommand(identityScript, []string{markerKey, setKey, fenceSeedKey}, quarantine.Milliseconds(), cfg.MaxTTL.Milliseconds())
	p, err := backend.New(backend.Config{
		URL:      rawURL,
		TLS:      cfg.TLSConfig,
		Timeout:  max(cfg.NodeTimeout, time.Second), // an operator's command: no hurry
		Scripts:  []*backend.Script{identityScript, claimScript, adoptScript, initScript},
		Commands: []string{"PEXPIRETIME"},
		Check: func(g backend.Greeting) error {
			if g.InfoErr != nil {
				return g.InfoErr
			}
			return checkCommands(g)
		},
		Hello: []*backend.Command{
			m.identity,
			backend.KeylessCommand("INFO", "replication"),
		},
		Admit: m.admit,
	})
	if err != nil {
		return nil, fmt.Errorf("backend %d: %w", group, err)
	}
	m.pipe, m.addr = p, p.Addr()
	return m, nil
}

// admit takes what the greeting told: the identity script's word (whose
// marker it wrote, as any proxy's greeting does), and the replicas.
func (m *adoptee) admit(g backend.Greeting) error {
	id, err := parseIdentity(g.Hello[:1])
	if err != nil {
		return err
	}
	if id.role != "master" {
		return &ReplicaError{Role: id.role}
	}
	info, err := g.Hello[1].Bulk()
	if err != nil {
		return err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			m.replicas, _ = strconv.Atoi(v)
		}
	}
	m.intact = (!m.greeted || m.intact && id.runID == m.runID) && id.previous == id.runID
	m.runID, m.read, m.greeted, m.greeting = id.runID, id.record, true, id
	return nil
}

// greet connects to every backend, and fails unless each answers as a
// master, each a server of its own.
func (a *adoption) greet(ctx context.Context) error {
	err := a.each(ctx, nil, func(ctx context.Context, _ int, m *adoptee) error {
		_, err := m.pipe.Do(ctx, backend.KeylessCommand("PING"))
		return err
	})
	if err != nil {
		return fmt.Errorf("nothing written: every backend of the new configuration must answer as a Redis master: %w", err)
	}
	byRunID := map[string]string{}
	for _, m := range a.members {
		if other, ok := byRunID[m.runID]; ok {
			return fmt.Errorf("nothing written: backends %s and %s are the same redis-server (run_id %s): it would have two votes", other, m.addr, m.runID)
		}
		byRunID[m.runID] = m.addr
	}
	return nil
}

// each runs f on every member that which marks (nil: all) at once, and
// returns the errors of those it failed on, each naming its backend.
func (a *adoption) each(ctx context.Context, which []bool, f func(context.Context, int, *adoptee) error) error {
	errs := make([]error, len(a.members))
	var wg sync.WaitGroup
	for i, m := range a.members {
		if which != nil && !which[i] {
			continue
		}
		wg.Go(func() {
			if err := f(ctx, i, m); err != nil {
				errs[i] = fmt.Errorf("backend %s: %w", m.addr, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// write runs script s, which answers 1 when it wrote (over the record it
// expects), and waits for the backend's replicas to acknowledge it.
func (m *adoptee) write(ctx context.Context, s *backend.Script, keys []string, args ...any) error {
	r, err := m.pipe.Do(ctx, backend.ScriptCommand(s, keys, args...))
	if err != nil {
		return err
	}
	if done, err := r.Integer(); err != nil || done != 1 {
		return errors.New("its record changed since adopt read it (another adopt, or a restart): run adopt again")
	}
	return m.wait(ctx)
}

// wait waits for the backend's replicas to acknowledge what was written
// on it, and counts how many did.
func (m *adoptee) wait(ctx context.Context) error {
	if m.replicas == 0 {
		return nil
	}
	r, err := m.pipe.Do(ctx, backend.KeylessCommand("WAIT", m.replicas, time.Second.Milliseconds()))
	if err != nil {
		return err
	}
	acked, _ := r.Integer()
	if m.acked < 0 || int(acked) < m.acked {
		m.acked = int(acked)
	}
	return nil
}

func (a *adoption) report(plan admit.Plan, dryRun bool) *AdoptReport {
	r := &AdoptReport{Done: plan.Done, DryRun: dryRun, Resumed: a.resumed && !plan.Done}
	r.Decided = slices.ContainsFunc(a.decided, func(d time.Duration) bool { return d > 0 })
	for _, s := range plan.Old {
		r.Stopped = append(r.Stopped, s.Name())
	}
	for _, s := range a.sets {
		r.Sets = append(r.Sets, s.Name())
	}
	for i, m := range a.members {
		am := AdoptedMember{Group: m.group, Addr: m.addr, After: a.sets[m.group].Name(), Replicas: m.replicas, Acked: m.replicas}
		if r, _ := admit.ParseRecord(m.read); r.Present {
			am.Before = r.Name()
			if r.Pending {
				am.Before += " (being adopted)"
			}
		}
		if plan.Wait[i] {
			am.Wait = a.wait(m.group)
		}
		r.Members = append(r.Members, am)
	}
	return r
}

func (a *adoption) close() {
	for _, m := range a.members {
		m.pipe.Close()
	}
}
