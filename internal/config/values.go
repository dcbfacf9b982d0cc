package config

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// value is a key's value while the file and the flags are read, kept as
// they give it: it is checked only once both are read, so that a flag may
// replace a bad value in the file as it may a good one.
type value interface {
	flag.Value // String is the value as its flag would give it
	decode(md *toml.MetaData, p toml.Primitive) error
	// apply checks the value's bounds and writes it to s.
	apply(s *settings) error
	// kind is the value's type and bounds, for -help.
	kind() string
	// want is the TOML value it takes, for a file that gives another type.
	want() string
	// fingerprint is the whole value, and the content of the file it
	// names, for telling whether a reload changed it.
	fingerprint() string
}

// cell is a value of type T, which is the type of the TOML value.
type cell[T any] struct {
	v       T
	typ     string
	example string                  // of a TOML value that has not T's type; default: the default
	parse   func(string) (T, error) // the flag's text
	show    func(T) string          // as the flag would give it
	to      func(*settings, T) error
}

func newCell[T any](typ string, def T, parse func(string) (T, error), show func(T) string, to func(*settings, T) error) func() value {
	return func() value { return &cell[T]{v: def, typ: typ, parse: parse, show: show, to: to} }
}

func (c *cell[T]) Set(s string) (err error) {
	c.v, err = c.parse(s)
	return err
}

func (c *cell[T]) String() string {
	if c == nil || c.show == nil { // flag.Value's contract: a zero value may be asked
		return ""
	}
	return c.show(c.v)
}

// IsBoolFlag lets a bool flag stand alone: -pprof for -pprof=true.
func (c *cell[T]) IsBoolFlag() bool { return c.typ == "bool" }

func (c *cell[T]) decode(md *toml.MetaData, p toml.Primitive) error {
	return md.PrimitiveDecode(p, &c.v)
}

func (c *cell[T]) apply(s *settings) error { return c.to(s, c.v) }

func (c *cell[T]) kind() string { return c.typ }

func (c *cell[T]) want() string {
	switch any(c.v).(type) {
	case bool:
		return "true or false"
	case int:
		return "an integer"
	case float64:
		return "a number"
	}
	example := c.example
	if example == "" {
		example = strconv.Quote(c.String())
	}
	switch _, list := any(c.v).([]string); {
	case list:
		return "an array of strings (" + example + ")"
	case strings.HasPrefix(c.typ, "duration"):
		return "a duration, as a string (" + example + ")"
	case example == `""`:
		return "a string"
	}
	return "a string (" + example + ")"
}

// incompatible finds the key of a value of the wrong type in the toml
// package's error, which gives it in no other way.
var incompatible = regexp.MustCompile(`\(last key "([^"]+)"\): incompatible types`)

// tomlType words a TOML type as the toml package names it (md.Type).
func tomlType(t string) string {
	switch t {
	case "Integer":
		return "an integer"
	case "Float":
		return "a float"
	case "String":
		return "a string"
	case "Bool":
		return "a boolean"
	case "Datetime":
		return "a date-time"
	case "Array":
		return "an array of something else"
	case "Hash":
		return "a table"
	case "ArrayHash":
		return "an array of tables"
	}
	return "a TOML " + t
}

func (c *cell[T]) fingerprint() string {
	v := c.String()
	if c.typ == "path" && v != "" {
		content, err := os.ReadFile(v)
		if err != nil {
			return v + "\x00" + err.Error()
		}
		return v + "\x00" + string(content)
	}
	return v
}

func parseText(s string) (string, error) { return s, nil }
func showText(s string) string           { return s }

// errParse and errRange are the flag package's own words for a bad number.
var (
	errParse = errors.New("parse error")
	errRange = errors.New("value out of range")
)

func numError(err error) error {
	if errors.Is(err, strconv.ErrRange) {
		return errRange
	}
	return errParse
}

// filename is a string key that names a file: a reload compares the file's
// content as well as its name.
func filename(def string, set func(*settings, string)) func() value {
	return newCell("path", def, parseText, showText, func(s *settings, v string) error {
		set(s, v)
		return nil
	})
}

// permissions is a file mode in octal, as chmod takes it: the owner's,
// the group's and everyone else's bits (700, 0660), nothing more.
func permissions(def string, set func(*settings, fs.FileMode)) func() value {
	return newCell("octal", def, parseText, showText, func(s *settings, v string) error {
		mode, err := strconv.ParseUint(v, 8, 32)
		if err != nil || mode > 0o777 {
			return fmt.Errorf("%q is not permissions in octal (e.g. 700, or 770 for the socket's group too)", v)
		}
		set(s, fs.FileMode(mode))
		return nil
	})
}

// text is a string key that takes any value.
func text(def string, set func(*settings, string)) func() value {
	return newCell("string", def, parseText, showText, func(s *settings, v string) error {
		set(s, v)
		return nil
	})
}

// choice is a string key that takes one of values.
func choice(def string, values []string, set func(*settings, string)) func() value {
	names := orList(values)
	return newCell("string: "+names, def, parseText, showText, func(s *settings, v string) error {
		if !slices.Contains(values, v) {
			return fmt.Errorf("%q is not %s", v, names)
		}
		set(s, v)
		return nil
	})
}

// level is a log level. slog's other spellings (INFO, warn+2) are taken
// too, as they always were.
func level(def string, set func(*settings, slog.Level)) func() value {
	const names = "debug, info, warn or error"
	return newCell("string: "+names, def, parseText, showText, func(s *settings, v string) error {
		var l slog.Level
		if err := l.UnmarshalText([]byte(v)); err != nil {
			return fmt.Errorf("%q is not %s", v, names)
		}
		set(s, l)
		return nil
	})
}

func boolean(def bool, set func(*settings, bool)) func() value {
	parse := func(s string) (bool, error) {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return false, errParse
		}
		return v, nil
	}
	return newCell("bool", def, parse, strconv.FormatBool, func(s *settings, v bool) error {
		set(s, v)
		return nil
	})
}

// integer is an int key that takes lo to hi, both included.
func integer(def, lo, hi int, set func(*settings, int)) func() value {
	typ := fmt.Sprintf("int in [%d, %d]", lo, hi)
	if hi == math.MaxInt {
		typ = fmt.Sprintf("int >= %d", lo)
	}
	parse := func(s string) (int, error) {
		v, err := strconv.ParseInt(s, 0, strconv.IntSize)
		if err != nil {
			return 0, numError(err)
		}
		return int(v), nil
	}
	return newCell(typ, def, parse, strconv.Itoa, func(s *settings, v int) error {
		switch {
		case v < lo:
			return fmt.Errorf("%d is below %d", v, lo)
		case v > hi:
			return fmt.Errorf("%d is above %d", v, hi)
		}
		set(s, v)
		return nil
	})
}

// ratio is a float key that takes what is between low and high, neither
// included.
func ratio(def, low, high float64, set func(*settings, float64)) func() value {
	parse := func(s string) (float64, error) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, numError(err)
		}
		return v, nil
	}
	show := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return newCell(fmt.Sprintf("float in (%g, %g)", low, high), def, parse, show, func(s *settings, v float64) error {
		if !(v > low && v < high) { // NaN too
			return fmt.Errorf("%g is outside (%g, %g)", v, low, high)
		}
		set(s, v)
		return nil
	})
}

// duration is a positive duration. TOML has none, so it is a string, as
// the flag is; an integer is refused rather than read as nanoseconds.
func duration(def string, set func(*settings, time.Duration)) func() value {
	return newCell("duration > 0", def, parseText, showText, func(s *settings, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration (e.g. 50ms, 60s)", v)
		}
		set(s, d)
		return nil
	})
}

// durationOrNever is a duration of 0s or more; 0s means never.
func durationOrNever(def string, set func(*settings, time.Duration)) func() value {
	return newCell("duration >= 0", def, parseText, showText, func(s *settings, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("%q is not a duration of 0s or more (e.g. 0s for never, 300s)", v)
		}
		set(s, d)
		return nil
	})
}

// address is a host:port to listen on, or empty for none. It is checked
// here, before anything starts: net.Listen would refuse port 99999 only
// after the backends were dialled, and in its own words.
func address(def string, set func(*settings, string)) func() value {
	return newCell("host:port", def, parseText, showText, func(s *settings, v string) error {
		if v == "" {
			set(s, v)
			return nil
		}
		_, port, err := net.SplitHostPort(v)
		if err != nil {
			return fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:7379, or :7379 for every interface)", v)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("port %s is out of range in %q: a port is a number from 1 to 65535 (0 picks a free one)", port, v)
		}
		set(s, v)
		return nil
	})
}

// list is a list of strings, empty by default: an array in TOML, a
// comma-separated list as a flag. example is what the array looks like in
// TOML, for a file that gives something else; check, if not nil, is the
// list's own.
func list(example string, check func([]string) error, set func(*settings, []string)) func() value {
	parse := func(s string) ([]string, error) {
		var l []string
		for v := range strings.SplitSeq(s, ",") {
			if v = strings.TrimSpace(v); v != "" {
				l = append(l, v)
			}
		}
		return l, nil
	}
	show := func(l []string) string { return strings.Join(l, ",") }
	c := newCell("list", nil, parse, show, func(s *settings, v []string) error {
		if check != nil {
			if err := check(v); err != nil {
				return err
			}
		}
		set(s, v)
		return nil
	})
	return func() value {
		v := c().(*cell[[]string])
		v.example = example
		return v
	}
}

// checkClusterNodes checks that each cluster node is a host and a port, as

// group is one [[groups]] table.
type group struct {
	Backends []string `toml:"backends"`
}

// groupsValue is [[groups]]: an array of tables in TOML, and a flag given
// once per group, its backends comma-separated, whose groups replace the
// file's.
type groupsValue struct {
	file  []group
	flags []string
	set   func(*settings, [][]string)
}

// groups is the [[groups]] key, empty by default.
func groups(set func(*settings, [][]string)) func() value {
	return func() value { return &groupsValue{set: set} }
}

func (g *groupsValue) String() string {
	if g == nil {
		return ""
	}
	return strings.Join(g.flags, " ")
}

func (g *groupsValue) Set(spec string) error {
	g.flags = append(g.flags, spec)
	return nil
}

func (g *groupsValue) decode(md *toml.MetaData, p toml.Primitive) error {
	return md.PrimitiveDecode(p, &g.file)
}

// apply checks each group's backends as backends are checked, and that no
// backend is in two groups: a backend keeps one set record.
func (g *groupsValue) apply(s *settings) error {
	var out [][]string
	for _, gr := range g.file {
		out = append(out, gr.Backends)
	}
	if g.flags != nil {
		out = nil
		for _, spec := range g.flags {
			var urls []string
			for u := range strings.SplitSeq(spec, ",") {
				if u = strings.TrimSpace(u); u != "" {
					urls = append(urls, u)
				}
			}
			out = append(out, urls)
		}
	}
	seen := map[string]int{}
	for i, urls := range out {
		if len(urls) == 0 {
			return fmt.Errorf("group %d: no backends", i+1)
		}
		if err := checkBackends(urls); err != nil {
			return fmt.Errorf("group %d: %w", i+1, err)
		}
		for _, u := range urls {
			name := backendName(u)
			if j, ok := seen[name]; ok {
				return fmt.Errorf("group %d: backend %s is in group %d too: a backend serves one group", i+1, name, j+1)
			}
			seen[name] = i
		}
	}
	g.set(s, out)
	return nil
}

func (g *groupsValue) kind() string { return "group (repeated)" }

func (g *groupsValue) want() string {
	return "an array of tables ([[groups]] with backends)"
}

func (g *groupsValue) fingerprint() string { return fmt.Sprintf("%q %q", g.file, g.flags) }

// user is one [[users]] table.
type user struct {
	Name           string `toml:"name"`
	PasswordSHA256 string `toml:"password_sha256"`
	PasswordBcrypt string `toml:"password_bcrypt"`
	KeyPrefix      string `toml:"key_prefix"`
	// Session has no flag form: a flag's prefix runs to the end.
	Session bool `toml:"session"`
}

// usersValue is [[users]], the one table-valued key: an array of tables in
// TOML, and a flag given once per user, whose users replace the file's.
type usersValue struct {
	file  []user
	flags []string // as given; read by apply, so a bad one is named by its entry
	set   func(*settings, []user)
}

// users is the [[users]] key, empty by default.
func users(set func(*settings, []user)) func() value {
	return func() value { return &usersValue{set: set} }
}

func (u *usersValue) String() string {
	if u == nil {
		return ""
	}
	return strings.Join(u.flags, " ")
}

// Set refuses a newline, which is a pasting mistake more likely than part
// of a key prefix.
func (u *usersValue) Set(spec string) error {
	if strings.Contains(spec, "\n") {
		return errors.New("a newline in the value")
	}
	u.flags = append(u.flags, spec)
	return nil
}

func (u *usersValue) decode(md *toml.MetaData, p toml.Primitive) error {
	return md.PrimitiveDecode(p, &u.file)
}

func (u *usersValue) apply(s *settings) error {
	users := u.file
	if u.flags != nil {
		users = nil
		for i, spec := range u.flags {
			v, err := parseUser(spec)
			if err != nil {
				return fmt.Errorf("entry %d: %w", i+1, err)
			}
			users = append(users, v)
		}
	}
	u.set(s, users)
	return nil
}

func (u *usersValue) kind() string { return "user (repeated)" }

func (u *usersValue) want() string {
	return "an array of tables ([[users]] with name and password_sha256 or password_bcrypt)"
}

func (u *usersValue) fingerprint() string { return fmt.Sprintf("%#v %q", u.file, u.flags) }

// parseUser reads the flag form of a user: name:sha256:HEX[:prefix] or
// name:bcrypt:HASH[:prefix]. The prefix is the rest, colons included.
// Errors name no part of the hash.
func parseUser(spec string) (user, error) {
	parts := strings.SplitN(spec, ":", 4)
	if len(parts) < 3 {
		return user{}, errors.New("not name:sha256:HEX[:key-prefix] or name:bcrypt:HASH[:key-prefix]")
	}
	u := user{Name: parts[0]}
	if len(parts) == 4 {
		u.KeyPrefix = parts[3]
	}
	switch parts[1] {
	case "sha256":
		u.PasswordSHA256 = parts[2]
	case "bcrypt":
		u.PasswordBcrypt = parts[2]
	default:
		// Not quoted: a hash or a password put in its place would be.
		return user{}, fmt.Errorf("user %q: the hash kind (second field) is not sha256 or bcrypt", u.Name)
	}
	return u, nil
}

// orList writes values as "a, b or c".
func orList(values []string) string {
	if len(values) < 2 {
		return strings.Join(values, "")
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}
