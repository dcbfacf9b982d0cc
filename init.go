package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// initialize is lockproxy init: on fresh backends, those of the
// configuration that args give (the proxy's own flags and file), it
// writes the first backend set record and markers that let them count at
// once, where they would otherwise wait max_ttl: nothing can witness how
// long the leases of an empty backend may last (README: The cold start). It
// refuses, and writes nothing, unless every backend is fresh.
func initialize(args []string, stdout io.Writer) error {
	cfg, err := toolConfig(args, stdout,
		"lockproxy init takes the same settings, and on fresh backends (no backend set record, no lockproxy marker of an earlier process, no lease horizon) writes the backend set they name, so that the proxies count them at once. Its safety is your word that no client holds a lock on them.",
		"init needs the backends of the configuration: backends, or groups")
	if cfg == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	report, err := quorum.Init(ctx, groupConfigs(cfg))
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	printInit(stdout, report)
	if !report.Written {
		return errors.New("init: nothing written: not every backend answered fresh")
	}
	return nil
}

// printInit writes what init found and wrote, a line a backend.
func printInit(w io.Writer, r *quorum.InitReport) {
	printSets(w, r.Sets)
	for _, m := range r.Members {
		line := fmt.Sprintf("  %s: fresh", m.Addr)
		switch {
		case m.Found != "":
			line = fmt.Sprintf("  %s: %s", m.Addr, m.Found)
		case r.Written:
			line += ": set recorded, counts at once"
		}
		if m.Replicas > 0 && r.Written {
			line += fmt.Sprintf("; %d of %d replicas acknowledged", m.Acked, m.Replicas)
		}
		fmt.Fprintln(w, line)
	}
	if r.Written {
		fmt.Fprintln(w, "initialised: start the proxies with this configuration")
		return
	}
	fmt.Fprintln(w, "nothing written: init writes only where every backend is fresh. Its safety is your word that no client holds a lock on them; a backend that carries lockproxy's data may hold locks, and waits until they are gone (docs/backends.md: Restarts, persistence and quarantine)")
}
