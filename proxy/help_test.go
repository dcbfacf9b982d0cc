package proxy

import (
	"slices"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestHelpListsWhatIsServed: each HELP lists exactly the subcommands the
// proxy serves, so that it never offers one that answers "unknown
// subcommand", nor hides one.
func TestHelpListsWhatIsServed(t *testing.T) {
	ts := startServer(t, Config{})
	for name, c := range ts.cmds {
		if c.subs == nil {
			continue
		}
		var served, listed []string
		if c.run != nil {
			served = append(served, "(no subcommand)")
		}
		for sub := range c.subs {
			if sub != "help" {
				served = append(served, sub)
			}
		}
		for _, e := range subcommandHelp[name] {
			usage := strings.ToLower(e[0])
			if usage != "(no subcommand)" {
				usage, _, _ = strings.Cut(usage, " ")
			}
			listed = append(listed, usage)
		}
		slices.Sort(served)
		slices.Sort(listed)
		if !slices.Equal(served, listed) {
			t.Errorf("%s HELP lists %q; the proxy serves %q", strings.ToUpper(name), listed, served)
		}
	}
	for name := range subcommandHelp {
		if c := ts.cmds[name]; c == nil || c.subs == nil {
			t.Errorf("help for %s, which has no subcommands", name)
		}
	}
}

// TestHelpReply: CONFIG HELP and CLIENT HELP answer Redis's help array (a
// heading, then each usage followed by its description indented four
// spaces, HELP last), in RESP2 and RESP3 alike, instead of "Try CLIENT
// HELP".
func TestHelpReply(t *testing.T) {
	ts := startServer(t, Config{})
	const configHelp = "*5\r\n" +
		"+CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n" +
		"+GET <pattern>\r\n" +
		"+    Return parameters matching the glob-like <pattern> and their values: none, as lockproxy exposes no settings.\r\n" +
		"+HELP\r\n" +
		"+    Prints this help.\r\n"
	const clientHelp = "*30\r\n" +
		"+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n" +
		"+GETNAME\r\n+    Return the name of the current connection.\r\n" +
		"+ID\r\n+    Return the ID of the current connection.\r\n" +
		"+INFO\r\n+    Return information about the current client connection.\r\n" +
		"+SETNAME <name>\r\n+    Assign the name <name> to the current connection.\r\n" +
		"+SETINFO <option> <value>\r\n+    Set client meta attr. Options are:\r\n+    * LIB-NAME: the client lib name.\r\n+    * LIB-VER: the client lib version.\r\n" +
		"+FENCING (ON|OFF)\r\n+    Answer LOCK.ACQUIRE with the lock's fencing token instead of OK (needs fencing = true).\r\n" +
		"+TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]\r\n+         [OPTIN] [OPTOUT] [NOLOOP]\r\n+    Control server assisted client side caching, in RESP3 (REDIRECT is refused).\r\n" +
		"+CACHING (YES|NO)\r\n+    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.\r\n" +
		"+GETREDIR\r\n+    Return the client ID we are redirecting to when tracking is enabled: 0, never redirecting.\r\n" +
		"+TRACKINGINFO\r\n+    Report tracking status for the current connection.\r\n" +
		"+CAPA <option> [<option> ...]\r\n+    Accepted and ignored: no capability changes lockproxy's replies.\r\n" +
		"+MAINT_NOTIFICATIONS (ON|OFF) [<option> <value> ...]\r\n+    Accepted and ignored: lockproxy sends no maintenance notifications.\r\n" +
		"+HELP\r\n+    Prints this help.\r\n"
	runWireCases(t, ts, []wireCase{
		{name: "CONFIG HELP", cmd: []string{"CONFIG", "HELP"}, want: configHelp},
		{name: "config help", cmd: []string{"config", "help"}, want: configHelp},
		{name: "CONFIG HELP in RESP3", setup: [][]string{{"HELLO", "3"}}, cmd: []string{"CONFIG", "HELP"}, want: configHelp},
		{name: "CLIENT HELP", cmd: []string{"CLIENT", "HELP"}, want: clientHelp},
		{name: "HELP arity", cmd: []string{"CONFIG", "HELP", "x"}, want: "-ERR wrong number of arguments for 'config|help' command\r\n"},
	})
}

// TestHelpAsRedis: the proxy's HELP replies have the shape of a real
// redis-server's (its heading, its last entry), and a subcommand that both
// serve has Redis's usage line.
func TestHelpAsRedis(t *testing.T) {
	redis := connect(t, redistest.Start(t).Addr())
	proxy := connect(t, startServer(t, Config{}).addr)
	for _, cmd := range []string{"CLIENT", "CONFIG", "COMMAND", "SCRIPT"} {
		theirs, ours := helpReply(t, redis, cmd), helpReply(t, proxy, cmd)
		if exp, got := theirs[0], ours[0]; exp != got {
			t.Errorf("%s HELP heading: redis-server %q, proxy %q", cmd, exp, got)
		}
		if exp, got := theirs[len(theirs)-2:], ours[len(ours)-2:]; !slices.Equal(exp, got) {
			t.Errorf("%s HELP ends: redis-server %q, proxy %q", cmd, exp, got)
		}
		usages := map[string]string{} // first word → usage, of redis-server's
		for _, l := range theirs[1:] {
			if !strings.HasPrefix(l, " ") {
				word, _, _ := strings.Cut(l, " ")
				usages[word] = l
			}
		}
		// Each usage is followed by at least one description line.
		previous := "    " // the heading stands for a description
		for _, l := range append(ours[1:], "END") {
			if !strings.HasPrefix(l, "    ") && !strings.HasPrefix(previous, "    ") {
				t.Errorf("%s HELP: %q follows %q; want a usage, then its description", cmd, l, previous)
			}
			previous = l
			word, _, _ := strings.Cut(l, " ")
			if usage, ok := usages[word]; ok && usage != l {
				t.Errorf("%s HELP: redis-server's usage %q, the proxy's %q", cmd, usage, l)
			}
		}
	}
}

// helpReply sends cmd HELP on w and returns the lines of its array of
// simple strings.
func helpReply(t *testing.T, w *wire, cmd string) []string {
	t.Helper()
	raw := w.do(cmd, "HELP")
	head, body, _ := strings.Cut(raw, "\r\n")
	if !strings.HasPrefix(head, "*") || !strings.HasPrefix(body, "+") {
		t.Fatalf("%s HELP: %q is not an array of simple strings", cmd, raw)
	}
	return strings.Split(strings.TrimSuffix(strings.TrimPrefix(body, "+"), "\r\n"), "\r\n+")
}
