package quorum

import (
	"context"
	"fmt"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/admit"
	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// A cold start (docs/design/horizon.md §4.6). Fresh backends look exactly
// like a group that lost every data set: no member can witness how long
// the leases it held may last, so each would wait the full max_ttl. Init,
// lockproxy init, is the operator's word that no client holds a lock on
// them: on backends that carry nothing of lockproxy's it writes the first
// record, marked for horizons, and markers that name each server's
// process with no wait. From then on every lease is recorded, and a
// backend that loses its data later waits by its witnesses' horizons.

// initScript is lua/init.lua: init's write on one fresh member.
var initScript = luaScript("init")

// InitReport is what Init found on every backend, and wrote.
type InitReport struct {
	// Sets names the sets written, one per shard group.
	Sets    []string
	Members []InitMember
	// Written is set when Init wrote, on every backend; else it wrote
	// nothing, and Members say why.
	Written bool
}

// InitMember is one backend as Init found it.
type InitMember struct {
	Group int // its shard group's index; 0 for a set of its own
	Addr  string
	// Found is what it carries that makes it no fresh backend ("" for a
	// fresh one), or why it did not answer.
	Found string
	// Replicas is how many replicas it has, Acked how many acknowledged
	// the write (WAIT).
	Replicas, Acked int
}

// Init writes the backend set of each of groups (as Adopt reads them) on
// every one of its backends, marked for horizons, with a marker that lets
// each count at once, where every backend answers as a Redis master and
// none carries a set record, a marker of an earlier process, or a lease
// horizon: all of them, or none. Its safety is the caller's word that no
// client holds a lock on them. It returns the report with Written unset
// when it wrote nothing for what a backend carries; an error when it
// could not tell, or a write failed. ctx bounds it all.
func Init(ctx context.Context, groups []Config) (*InitReport, error) {
	a, err := newAdoption(groups)
	defer a.close()
	if err != nil {
		return nil, err
	}
	report := &InitReport{}
	for _, s := range a.sets {
		report.Sets = append(report.Sets, s.Name())
	}
	found := make([]string, len(a.members))
	a.each(ctx, nil, func(ctx context.Context, i int, m *adoptee) error {
		if _, err := m.pipe.Do(ctx, backend.KeylessCommand("PING")); err != nil {
			found[i] = "no answer as a Redis master: " + err.Error()
			return nil
		}
		found[i] = m.found()
		return nil
	})
	byRunID := map[string]string{}
	for i, m := range a.members {
		if found[i] != "" {
			continue
		}
		if other, ok := byRunID[m.runID]; ok {
			found[i] = fmt.Sprintf("the same redis-server as %s (run_id %s): it would have two votes", other, m.runID)
		}
		byRunID[m.runID] = m.addr
	}
	fresh := true
	for i, m := range a.members {
		report.Members = append(report.Members, InitMember{Group: m.group, Addr: m.addr, Found: found[i], Replicas: m.replicas, Acked: m.replicas})
		fresh = fresh && found[i] == ""
	}
	if !fresh {
		return report, nil
	}
	err = a.each(ctx, nil, func(ctx context.Context, i int, m *adoptee) error {
		r, err := m.pipe.Do(ctx, backend.ScriptCommand(initScript, []string{setKey, markerKey, horizonKey}, admit.Final(a.sets[m.group]).String()))
		if err != nil {
			return err
		}
		what, err := r.Bulk()
		switch {
		case err != nil:
			return err
		case what != "":
			return fmt.Errorf("it carries %s since init read it: nothing written there", what)
		}
		return m.wait(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("written on some backends only: %w", err)
	}
	for i, m := range a.members {
		if m.acked >= 0 {
			report.Members[i].Acked = m.acked
		}
	}
	report.Written = true
	return report, nil
}

// found is what the greeting found on a backend that makes it no fresh
// one, "" for a fresh one: no record, no lease horizon, and a marker that
// it had none (the greeting's identity script wrote one that names the
// process, reason unmarked) or that an init of this process wrote.
func (m *adoptee) found() string {
	id := m.greeting
	switch {
	case id.record != "":
		what := "it records the backend set "
		if r, err := admit.ParseRecord(id.record); err == nil && r.Pending {
			what = "lockproxy adopt is writing the backend set "
		}
		return what + mustRecord(id.record).Name()
	case id.horizon > 0:
		return fmt.Sprintf("it carries a lease horizon: a lease recorded on it may be held for %s more", id.horizon.Round(time.Millisecond))
	case id.previous != "" && id.previous != id.runID:
		return "it carries a lockproxy marker of an earlier process (run_id " + id.previous + "): its data set was lockproxy's before it restarted or failed over"
	case id.previous != "" && id.reason != admit.ReasonUnmarked && id.reason != admit.ReasonInit:
		return fmt.Sprintf("it carries a lockproxy marker that makes it wait (reason %s): its data set may hold locks", id.reason)
	}
	return ""
}
