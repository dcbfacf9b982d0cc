package proxy

import "fmt"

// settings are a Config with its defaults and the users it makes. Once
// stored in Server.live they are never modified.
type settings struct {
	cfg   Config
	users *users
}

// Reload makes cfg's limits and users those of every connection accepted
// from now on, and cfg's users those that AUTH and HELLO ... AUTH check on
// every connection, all in one step. A connection already open keeps the
// limits it was accepted with, and the user it authenticated as (or
// started as) with that user's key prefix and key and token limits, until
// it authenticates again, sends RESET, or closes: nothing in flight is cut
// off, and a password changed or a user removed does not close the
// connections that used it. MaxClients bounds the next accept; the
// connections beyond a lowered bound stay open. A user who keeps its name
// and key prefix keeps its loaded scripts. The engine's collaborators
// (Backends, Watcher, Lister), Logger, Observer and Embedded are ignored:
// they are New's. Reload fails, and changes nothing, when New
// would fail with cfg.
func (s *Server) Reload(cfg Config) error {
	if cfg.MaxRequestBytes < 0 || cfg.MaxRequestBytes > MaxRequestBytesLimit {
		return fmt.Errorf("proxy: max request bytes %d out of range [0 (the default), %d]", cfg.MaxRequestBytes, MaxRequestBytesLimit)
	}
	for _, v := range []struct {
		name string
		n    int64
	}{
		{"idle timeout", int64(cfg.IdleTimeout)}, {"write timeout", int64(cfg.WriteTimeout)},
		{"max clients", int64(cfg.MaxClients)}, {"max key bytes", int64(cfg.MaxKeyBytes)}, {"max token bytes", int64(cfg.MaxTokenBytes)},
	} {
		if v.n < 0 {
			return fmt.Errorf("proxy: negative %s", v.name)
		}
	}
	cfg = cfg.withDefaults()
	users, err := newUsers(cfg, func(prefix string) *keyspace { return s.newKeyspace(prefix, cfg) })
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	if old := s.live.Load(); old != nil {
		users.keepScripts(old.users)
	}
	s.live.Store(&settings{cfg: cfg, users: users})
	return nil
}

// settings returns what connections see now.
func (s *Server) settings() *settings { return s.live.Load() }
