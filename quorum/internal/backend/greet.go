package backend

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Greeting is what the greeting of a new connection learned of the
// server: facts, for Config.Admit to judge.
type Greeting struct {
	// RunID, Uptime and Version are INFO server's run_id,
	// uptime_in_seconds (rounded down, as the server gives it) and
	// redis_version ("" when not given); all zero when INFO failed.
	RunID   string
	Uptime  time.Duration
	Version string
	// Mode is INFO server's redis_mode: standalone, cluster or sentinel.
	Mode string
	// InfoErr is INFO server's error reply: INFO denied to the user, or a
	// server that is not Redis (such as an embedded one).
	InfoErr error
	// Known tells, of each of Config.Commands that COMMAND INFO spoke of,
	// whether the server knows it. A command it did not speak of (COMMAND
	// denied, or an answer of another shape) is missing.
	Known map[string]bool
	// LoadErr is the first error reply to SCRIPT LOAD: not every one of
	// Config.Scripts is loaded.
	LoadErr error
	// Hello are the replies to Config.Hello, in order, for Admit.
	Hello []Reply
}

// greet authenticates and selects the database the URL names, learns what
// server it reached (hello), lets Check judge it, sends Hello, and lets
// Admit judge it all. Each of its round trips writes everything before
// reading anything.
func (pp *Pipe) greet(rw *bufio.ReadWriter) error {
	if err := authenticate(rw, pp.opt); err != nil {
		return err
	}
	g, err := pp.hello(rw)
	if err != nil {
		return err
	}
	if g.InfoErr != nil && strings.HasPrefix(g.InfoErr.Error(), "NOAUTH") {
		// Not a fact for Check to weigh: nothing at all is served.
		return &AuthError{Addr: pp.opt.Addr, User: pp.opt.Username, Password: pp.opt.Password != "", Reply: g.InfoErr.Error()}
	}
	if pp.cfg.Check != nil {
		if err := pp.cfg.Check(g); err != nil {
			return err
		}
	}
	if len(pp.cfg.Hello) > 0 {
		for _, c := range pp.cfg.Hello {
			rw.Write(c.wire)
		}
		if err := rw.Flush(); err != nil {
			return err
		}
		for range pp.cfg.Hello {
			r, err := readReply(rw.Reader)
			if err != nil {
				return err
			}
			g.Hello = append(g.Hello, r)
		}
	}
	if pp.cfg.Admit == nil {
		return nil
	}
	return pp.cfg.Admit(g)
}

// authenticate sends the AUTH and SELECT that opt asks for, if any, in one
// round trip.
func authenticate(rw *bufio.ReadWriter, opt *redis.Options) error {
	var cmds []*Command
	switch {
	case opt.Username != "":
		cmds = append(cmds, KeylessCommand("AUTH", opt.Username, opt.Password))
	case opt.Password != "":
		cmds = append(cmds, KeylessCommand("AUTH", opt.Password))
	}
	if opt.DB != 0 {
		cmds = append(cmds, KeylessCommand("SELECT", opt.DB))
	}
	for _, c := range cmds {
		rw.Write(c.wire)
	}
	if err := rw.Flush(); err != nil {
		return err
	}
	for _, c := range cmds {
		r, err := readReply(rw.Reader)
		if err != nil {
			return err
		}
		name := strings.SplitN(string(c.wire), "\r\n", 4)[2]
		switch {
		case r.kind != '-':
		case name == "AUTH":
			return &AuthError{Addr: opt.Addr, User: opt.Username, Password: opt.Password != "", Reply: r.str}
		default:
			return serverError(name + ": " + r.str)
		}
	}
	return nil
}

// hello asks INFO server and COMMAND INFO, and loads the scripts, in one
// round trip. It fails only when the stream breaks or INFO server is not
// what Redis sends; every other error reply is a fact of the Greeting.
func (pp *Pipe) hello(rw *bufio.ReadWriter) (Greeting, error) {
	cmds := []*Command{KeylessCommand("INFO", "server")}
	if names := pp.cfg.Commands; len(names) > 0 {
		args := []any{"INFO"}
		for _, name := range names {
			args = append(args, name)
		}
		cmds = append(cmds, KeylessCommand("COMMAND", args...))
	}
	for _, s := range pp.cfg.Scripts {
		cmds = append(cmds, &Command{wire: s.load})
	}
	for _, c := range cmds {
		rw.Write(c.wire)
	}
	if err := rw.Flush(); err != nil {
		return Greeting{}, err
	}
	replies := make([]Reply, len(cmds))
	for i := range cmds {
		r, err := readReply(rw.Reader)
		if err != nil {
			return Greeting{}, err
		}
		replies[i] = r
	}
	var g Greeting
	if r := replies[0]; r.kind == '-' {
		g.InfoErr = serverError(r.str)
	} else {
		var err error
		if g, err = parseServerInfo(r.str); err != nil {
			return Greeting{}, err
		}
	}
	loads := replies[1:]
	if len(pp.cfg.Commands) > 0 {
		g.Known = commandsKnown(replies[1], pp.cfg.Commands)
		loads = loads[1:]
	}
	for _, r := range loads {
		if r.kind == '-' {
			g.LoadErr = serverError(r.str)
			break
		}
	}
	return g, nil
}

// parseServerInfo reads run_id, uptime_in_seconds and redis_version from
// INFO server; the first two are required.
func parseServerInfo(info string) (Greeting, error) {
	var g Greeting
	seconds := -1
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch name {
		case "run_id":
			g.RunID = value
		case "redis_version":
			g.Version = value
		case "redis_mode":
			g.Mode = value
		case "uptime_in_seconds":
			var err error
			if seconds, err = strconv.Atoi(value); err != nil {
				return Greeting{}, fmt.Errorf("backend: bad uptime_in_seconds %q", value)
			}
		}
	}
	if seconds < 0 || g.RunID == "" {
		return Greeting{}, fmt.Errorf("backend: INFO server lacks run_id or uptime_in_seconds")
	}
	g.Uptime = time.Duration(seconds) * time.Second
	return g, nil
}

// commandsKnown reads COMMAND INFO names...: for each name, nil when the
// server does not know it, its description (whose first element is its
// name) when it does; any other answer tells nothing.
func commandsKnown(r Reply, names []string) map[string]bool {
	if r.kind != '*' || len(r.array) != len(names) {
		return nil
	}
	known := make(map[string]bool, len(names))
	for i, cmd := range r.array {
		switch {
		case cmd.kind == 0:
			known[names[i]] = false
		case cmd.kind == '*' && len(cmd.array) > 0 && strings.EqualFold(cmd.array[0].str, names[i]):
			known[names[i]] = true
		}
	}
	return known
}
