package quorum

import (
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
// record and the epoch waits. Each write is
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
	a := &adoption{}
	defer a.close()
	for g, cfg := range groups {
		cfg = cfg.withDefaults()
		if err := cfg.validate(); err != nil {
			return nil, err
		}
		where := make([]string, len(cfg.Backends))
		for i, u := range cfg.Backends {
			var err error
			if where[i], err = backend.Where(u); err != nil {
				return nil, fmt.Errorf("backend %d: %w", i, err)
			}
		}
		set := newBackendSet(cfg.BackendSetEpoch, where, cfg.SetLabel)
		a.sets = append(a.sets, set)
		a.waits = append(a.waits, cfg.MaxTTL+time.Duration(float64(cfg.MaxTTL)*cfg.DriftFactor)+driftFloor)
		for i, u := range cfg.Backends {
			m, err := newAdoptee(g, u, cfg)
			if err != nil {
				return nil, err
			}
			m.where = where[i]
			a.members = append(a.members, m)
		}
	}
	if err := a.greet(ctx); err != nil {
		return nil, err
	}
	in := make([]admit.Member, len(a.members))
	for i, m := range a.members {
		rec, _ := admit.ParseRecord(m.read)
		in[i] = admit.Member{Set: m.group, Addr: m.where, Record: rec}
	}
	plan, err := admit.PlanAdopt(a.sets, in)
	var pe *admit.PlanError
	switch {
	case errors.As(err, &pe) && pe.Member >= 0:
		return nil, fmt.Errorf("nothing written: backend %s: %s", a.members[pe.Member].addr, pe.Reason)
	case err != nil:
		return nil, fmt.Errorf("nothing written: %w", err)
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
			pending := admit.PendingFor(a.sets[m.group], plan.Wait[i]).String()
			return m.write(ctx, claimScript, []string{setKey}, m.read, pending)
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
	// Pass 2, once every member refuses the old epoch: the final record,
	// and the epoch wait, counted from now, where the plan says.
	err = a.each(ctx, plan.Write, func(ctx context.Context, i int, m *adoptee) error {
		pending := admit.PendingFor(a.sets[m.group], plan.Wait[i]).String()
		wait := time.Duration(0)
		if plan.Wait[i] {
			wait = a.waits[m.group]
		}
		return m.write(ctx, adoptScript, []string{setKey, markerKey}, pending, admit.Final(a.sets[m.group]).String(), wait.Milliseconds())
	})
	if err != nil {
		return nil, err
	}
	for i, m := range a.members {
		if m.acked >= 0 {
			report.Members[i].Acked = m.acked
		}
	}
	return report, nil
}

// takenBack reads every member's record and marks those that record
// neither the pending record nor none, each with what it records.
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
		if rel := admit.Relate(a.sets[m.group], rec); rel != admit.Adopting && rel != admit.Absent {
			back[i], m.read = true, raw
		}
		return nil
	})
	return back, err
}

// adoption is one run of Adopt.
type adoption struct {
	sets    []admit.Set
	waits   []time.Duration // each set's epoch wait: max_ttl and its drift allowance
	members []*adoptee
}

// adoptee is one backend of an adoption.
type adoptee struct {
	group    int
	addr     string
	where    string // host:port/db, as sets list their members
	pipe     *backend.Pipe
	runID    string
	read     string // its record as read, "" none
	replicas int
	acked    int // the fewest replicas that acknowledged a write
}

func newAdoptee(group int, rawURL string, cfg Config) (*adoptee, error) {
	m := &adoptee{group: group, acked: -1}
	quarantine := cfg.MaxTTL
	if cfg.DisableRestartQuarantine {
		quarantine = 0
	}
	p, err := backend.New(backend.Config{
		URL:      rawURL,
		TLS:      cfg.TLSConfig,
		Timeout:  max(cfg.NodeTimeout, time.Second), // an operator's command: no hurry
		Scripts:  []*backend.Script{identityScript, claimScript, adoptScript},
		Commands: []string{"PEXPIRETIME"},
		Check: func(g backend.Greeting) error {
			if g.InfoErr != nil {
				return g.InfoErr
			}
			return checkCommands(g)
		},
		Hello: []*backend.Command{
			backend.ScriptCommand(identityScript, []string{markerKey, setKey, fenceSeedKey}, quarantine.Milliseconds(), cfg.MaxTTL.Milliseconds()),
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
	m.runID, m.read = id.runID, id.record
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
	if m.replicas == 0 {
		return nil
	}
	r, err = m.pipe.Do(ctx, backend.KeylessCommand("WAIT", m.replicas, time.Second.Milliseconds()))
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
	r := &AdoptReport{Done: plan.Done, DryRun: dryRun}
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
			am.Wait = a.waits[m.group]
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
