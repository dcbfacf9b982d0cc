package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/lockproxy/lockproxy/internal/config"
	"github.com/lockproxy/lockproxy/quorum"
)

// adopt is lockproxy adopt: it writes the backend set of the configuration
// that args give (the proxy's own flags and file) to every one of its
// backends, the explicit step of a change of backends (docs/backends.md:
// Changing the backend set), and says what it wrote. -dry-run says what it would write.
func adopt(args []string, stdout io.Writer) error {
	dryRun := false
	args = slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		found := a == "-dry-run" || a == "--dry-run"
		dryRun = dryRun || found
		return found
	})
	cfg, err := toolConfig(args, stdout,
		"lockproxy adopt [-dry-run] takes the same settings, and writes the backend set they name (backends or groups, backend_set_epoch) to every one of its backends.",
		"adopt needs the backends of the configuration to adopt: backends, or groups, with backend_set_epoch")
	if cfg == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	report, err := quorum.Adopt(ctx, groupConfigs(cfg), dryRun)
	if err != nil {
		return fmt.Errorf("adopt: %w", err)
	}
	printAdopt(stdout, report)
	return nil
}

// printAdopt writes what adopt found and wrote, a line a backend.
func printAdopt(w io.Writer, r *quorum.AdoptReport) {
	printSets(w, r.Sets)
	if r.Done {
		fmt.Fprintln(w, "every backend records it already: nothing written")
		return
	}
	for _, s := range r.Stopped {
		fmt.Fprintf(w, "stops the set %s: its proxies are refused from the first write on\n", s)
	}
	waits := slices.ContainsFunc(r.Members, func(m quorum.AdoptedMember) bool { return m.Wait > 0 })
	for _, h := range r.Horizons {
		if h.Witnesses >= h.Needed {
			fmt.Fprintf(w, "waits for the old set %s's leases by their horizons: %d of its members answered as witnesses (%d needed), the longest lease recorded on them ends in %s\n",
				h.Set, h.Witnesses, h.Needed, roundWait(h.Longest))
		} else {
			fmt.Fprintf(w, "waits max_ttl and its drift allowance for the old set %s's leases: %d of its members answered as witnesses, %d needed\n",
				h.Set, h.Witnesses, h.Needed)
		}
		for _, why := range h.NotWitnesses {
			fmt.Fprintf(w, "  no witness: %s\n", why)
		}
	}
	if r.Floor > 0 {
		fmt.Fprintf(w, "an earlier change of the backend set left its old epoch's locks up to %s to run: the waits last at least that\n", roundWait(r.Floor))
	}
	switch {
	case !waits:
	case r.DryRun && len(r.Stopped) > 0:
		fmt.Fprintln(w, "the waits shown are max_ttl's: adopt reads the old set's horizons once every backend refuses it, and waits only as long as its longest lease")
	case r.Resumed && r.Decided:
		fmt.Fprintln(w, "finishes an adopt cut short: the waits are those it decided from the old set's horizons")
	case r.Resumed:
		fmt.Fprintln(w, "finishes an adopt cut short that decided no wait from horizons: the waits are max_ttl and its drift allowance")
	}
	end := time.Now()
	for _, m := range r.Members {
		before := m.Before
		if before == "" {
			before = "(none)"
		}
		counts := "counts at once (after any quarantine of its own)"
		if m.Wait > 0 {
			counts = fmt.Sprintf("epoch wait %s: counts from %s", roundWait(m.Wait), end.Add(m.Wait).UTC().Format(time.RFC3339))
		}
		line := fmt.Sprintf("  %s: %s -> %s, %s", m.Addr, before, m.After, counts)
		if m.Replicas > 0 {
			line += fmt.Sprintf("; %d of %d replicas acknowledged", m.Acked, m.Replicas)
		}
		fmt.Fprintln(w, line)
	}
	if r.DryRun {
		fmt.Fprintln(w, "dry run: nothing written")
		return
	}
	fmt.Fprintln(w, "adopted: restart every proxy with this configuration now; those of the old one answer NOQUORUM from here on")
}

// roundWait rounds a wait for adopt's lines: to the second, or to the
// millisecond below one, where a short lease's wait would read 0s.
func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// toolConfig loads the configuration of a command that acts on the
// backends themselves (adopt, init): the proxy's own flags and file, so
// that it acts on exactly the backends the proxies run. A nil
// configuration means there is nothing to do: -h, answered with the
// command's help, or err.
func toolConfig(args []string, stdout io.Writer, help, needsBackends string) (*config.Config, error) {
	cfg, err := config.Load(args, os.LookupEnv, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintln(stdout, "\n"+help)
		return nil, nil
	case err != nil:
		return nil, err
	case cfg.Embedded:
		return nil, &config.UsageError{Msg: needsBackends}
	}
	return cfg, nil
}

// printSets writes the backend sets a command acts on, a line a shard
// group.
func printSets(w io.Writer, sets []string) {
	for g, s := range sets {
		name := "backend set"
		if len(sets) > 1 {
			name = fmt.Sprintf("group %d's backend set", g+1)
		}
		fmt.Fprintf(w, "%s %s\n", name, s)
	}
}
