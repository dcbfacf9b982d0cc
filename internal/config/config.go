package config

import (
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// Config is the resolved configuration: what main wires together. A field
// is the key of its name (Listen is listen, ShutdownTimeout
// shutdown_timeout) once checked; the engine's keys are in Quorum, the
// front end's in Proxy.
type Config struct {
	Listen         string
	TLSListen      string
	UnixSocket     string
	UnixSocketPerm fs.FileMode
	TLS            *tls.Config // of the TLS listener, when TLSListen is set
	Metrics        string
	Pprof          bool // serve /debug/pprof/ next to /metrics
	// Embedded is set when neither a file nor backends were given: run on
	// in-memory backends.
	Embedded        bool
	ShutdownTimeout time.Duration
	LogFormat       string
	LogLevel        slog.Level
	Quorum          quorum.Config
	// Groups are the backends of each shard group ([[groups]]); empty:
	// Quorum.Backends is the one group.
	Groups [][]string
	Proxy  proxy.Config
	// Fingerprints are what a reload compares to tell which keys changed.
	Fingerprints Fingerprints
}

// settings is what the keys write to: the Config, and what only several
// keys together make part of it (TLS).
type settings struct {
	Config
	tlsCertFile, tlsKeyFile, tlsCACertFile                                string
	tlsMinVersion                                                         uint16
	backendCACertFile, backendCertFile, backendKeyFile, backendServerName string
	passwordFile, usersFile                                               string
	// configured is whether a configuration file was read or the backends
	// were given: the embedded backends are then never a fallback.
	configured bool
}

// ErrVersion is -version's answer to Load's caller: print the
// version, start nothing.
var ErrVersion = errors.New("version requested")

// UsageError is a command line that does not parse. main exits 2 with it,
// as the flag package's own ExitOnError does, and prints a pointer to
// -help rather than the whole of it, which would bury the one line that
// matters.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string {
	return e.Msg + "\nRun lockproxy -help for every flag and configuration key."
}

// Load reads the TOML file named by -config, if any, lets every
// environment variable that env finds (LOCKPROXY_MAX_TTL) override its key,
// and every flag that was set override both. Every error names the key. It
// only reads: it logs nothing, and out hears only -help, so that a reload
// may call it again. It returns flag.ErrHelp after writing -help to out,
// ErrVersion for -version, and a *UsageError for a command line that does
// not parse.
func Load(args []string, env func(string) (string, bool), out io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("lockproxy", flag.ContinueOnError)
	// The flag package's own complaint prints the whole usage after the
	// error; the error alone is returned, with a suggestion.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	path := fs.String("config", "", "TOML configuration file (see config.example.toml)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	values := make([]value, len(keys))
	for i, k := range keys {
		values[i] = k.value()
		fs.Var(values[i], k.flag(), k.help)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(out, values)
			return nil, err
		}
		return nil, flagError(fs, err)
	}
	if *showVersion {
		return nil, ErrVersion
	}
	if fs.NArg() > 0 {
		return nil, &UsageError{fmt.Sprintf("unexpected argument %q: every setting is a flag (-name value)", fs.Arg(0))}
	}
	flagged := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { flagged[f.Name] = true })
	// given names where each key's value comes from when not the file:
	// the file's value of such a key is only checked.
	given := map[string]string{}
	for i, k := range keys {
		if flagged[k.flag()] {
			given[k.name] = "-" + k.flag()
			continue
		}
		if v, ok := env(k.env()); ok {
			given[k.name] = k.env()
			if err := setFromEnv(values[i], v); err != nil {
				return nil, fmt.Errorf("%s (%s): %w", k.name, k.env(), err)
			}
		}
	}
	if *path != "" {
		if err := readFile(*path, values, given); err != nil {
			return nil, fmt.Errorf("%s: %w", *path, err)
		}
	}
	_, backends := given["backends"]
	s := &settings{configured: *path != "" || backends}
	if *path != "" {
		s.Proxy.ConfigFile, _ = filepath.Abs(*path)
	}
	for i, k := range keys {
		if err := values[i].apply(s); err != nil {
			if src := given[k.name]; strings.HasPrefix(src, "LOCKPROXY_") {
				return nil, fmt.Errorf("%s (%s): %w", k.name, src, err)
			}
			return nil, fmt.Errorf("%s: %w", k.name, err)
		}
	}
	// Before resolve reads the files: one that changes in between then
	// counts as changed at the next reload, rather than never.
	s.Fingerprints = fingerprints(values)
	return s.resolve()
}

// Fingerprints are a hash of each key's value and of the content of the
// file it names, if any, by key: a certificate rotated in place counts as
// changed, and no secret is kept in clear beyond the configuration itself.
type Fingerprints map[string][sha256.Size]byte

func fingerprints(values []value) Fingerprints {
	fp := make(Fingerprints, len(keys))
	for i, k := range keys {
		fp[k.name] = sha256.Sum256([]byte(values[i].fingerprint()))
	}
	return fp
}

// Changed names the keys whose fingerprints differ from running's, by what
// a reload does with each, in the table's order.
func (f Fingerprints) Changed(running Fingerprints) map[OnReload][]string {
	changed := map[OnReload][]string{}
	for _, k := range keys {
		if f[k.name] != running[k.name] {
			changed[k.reload] = append(changed[k.reload], k.name)
		}
	}
	return changed
}

// setFromEnv sets v from an environment variable, which holds what the
// flag takes; for users, one user a line, as the flag takes one at a time.
func setFromEnv(v value, text string) error {
	u, ok := v.(*usersValue)
	if !ok {
		return v.Set(text)
	}
	for line := range strings.SplitSeq(text, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			if err := u.Set(line); err != nil {
				return err
			}
		}
	}
	return nil
}

// readFile decodes the TOML file at path into values, but for the keys
// given otherwise (a flag, the environment): those go to a value that is
// dropped, so that the file is held to the keys' types even where it is
// overridden.
func readFile(path string, values []value, given map[string]string) error {
	var file map[string]toml.Primitive
	md, err := toml.DecodeFile(path, &file)
	if err != nil {
		return redactParseError(err)
	}
	for i, k := range keys {
		p, ok := file[k.name]
		if !ok {
			continue
		}
		v := values[i]
		if _, ok := given[k.name]; ok {
			v = k.value()
		}
		if err := v.decode(&md, p); err != nil {
			// An error about the key itself (not users.name) is its value's
			// type, which the decoder words in Go's terms ("destination
			// has type slice"), and only in its text.
			if m := incompatible.FindStringSubmatch(err.Error()); m != nil {
				switch {
				case m[1] == k.name:
					return fmt.Errorf("%s: want %s, got %s", k.name, k.value().want(), tomlType(md.Type(k.name)))
				case k.name == "users": // a field of a user, all strings
					return fmt.Errorf("%s: want a string, got %s", m[1], tomlType(md.Type(strings.Split(m[1], ".")...)))
				}
			}
			return err // names the key (users.name)
		}
	}
	// Decoding into the map marked every top-level key decoded, the unknown
	// ones too; what a value did not decode is left in Undecoded.
	undecoded := map[string]bool{}
	for _, k := range md.Undecoded() {
		undecoded[k.String()] = true
	}
	for _, k := range md.Keys() {
		if undecoded[k.String()] || len(k) == 1 && !slices.ContainsFunc(keys, func(r key) bool { return r.name == k[0] }) {
			return unknownKey(k)
		}
	}
	return nil
}

// unknownKey words a key of the file that no key of the table is, with
// the key probably meant: a top-level one, or a field of its table
// (users.pasword_sha256).
func unknownKey(k toml.Key) error {
	var known []string
	switch {
	case len(k) == 1:
		for _, r := range keys {
			known = append(known, r.name)
		}
	case len(k) == 2 && k[0] == "users":
		known = tomlFields(user{})
	case len(k) == 2 && k[0] == "groups":
		known = tomlFields(group{})
	}
	if s := suggest(k[len(k)-1], known); s != "" {
		meant := append(slices.Clone(k[:len(k)-1]), s)
		return fmt.Errorf("unknown key %q; did you mean %s?", k.String(), meant.String())
	}
	return fmt.Errorf("unknown key %q", k.String())
}

// redactParseError keeps a TOML syntax error's line and key but drops its
// message when the key may hold a secret (a password, a hash, a backend
// URL's credentials): the message quotes the text the parser stumbled on,
// and the error is printed at start and logged on reload.
func redactParseError(err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	switch name, _, _ := strings.Cut(pe.LastKey, "."); name {
	case "password", "users", "backends", "groups":
		return fmt.Errorf("toml: line %d (last key %q): syntax error (not shown: the value may hold a secret)", pe.Position.Line, pe.LastKey)
	}
	return err
}

// flagError words a flag that does not parse, with the flag that was
// probably meant when one is undefined.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var defined []string
		fs.VisitAll(func(f *flag.Flag) { defined = append(defined, f.Name) })
		if s := suggest(strings.TrimLeft(name, "-"), append(defined, "help")); s != "" {
			msg += "\ndid you mean -" + s + "?"
		}
	}
	return &UsageError{msg}
}

// suggest returns the name among known nearest to name, a mistyped one,
// or "" when none is near enough to be what was meant. Dashes and
// underscores are one, and so are capitals and small letters: a TOML
// spelling (max_ttl) finds its flag (max-ttl) at once, and a flag's
// spelling, or an environment variable's, its key.
func suggest(name string, known []string) string {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "-")) }
	name = norm(name)
	// A third of the name: -backend finds -backends, -ttl finds nothing.
	best, bestDist := "", max(1, len(name)/3)+1
	for _, k := range known {
		if dist := editDistance(name, norm(k)); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	return best
}

// tomlFields are the TOML names of a table's fields, from their tags.
func tomlFields(table any) []string {
	t := reflect.TypeOf(table)
	names := make([]string, t.NumField())
	for i := range names {
		names[i] = t.Field(i).Tag.Get("toml")
	}
	return names
}

// editDistance is the optimal string alignment distance between a and b:
// Levenshtein's, with two neighbours swapped (-hepl) one edit, as a typist
// makes it. By bytes: flag names are ASCII.
func editDistance(a, b string) int {
	rows := [3][]int{make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)}
	for j := range rows[1] {
		rows[1][j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev2, prev, cur := rows[0], rows[1], rows[2]
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		rows = [3][]int{prev, cur, prev2}
	}
	return rows[1][len(b)]
}
