package proxy

import (
	"strings"

	"github.com/tidwall/redcon"
)

// subcommandHelp is what CLIENT HELP, CONFIG HELP, COMMAND HELP and SCRIPT
// HELP answer: for each subcommand the proxy serves, in the order shown,
// its usage and the lines that describe it, in Redis's words where it
// behaves as Redis does. "(no subcommand)" describes the bare command.
// HELP itself comes last, as in Redis; every other subcommand must be
// served (commands_test.go checks both ways).
var subcommandHelp = map[string][][]string{
	"client": {
		{"GETNAME", "Return the name of the current connection."},
		{"ID", "Return the ID of the current connection."},
		{"INFO", "Return information about the current client connection."},
		{"SETNAME <name>", "Assign the name <name> to the current connection."},
		{"SETINFO <option> <value>", "Set client meta attr. Options are:", "* LIB-NAME: the client lib name.", "* LIB-VER: the client lib version."},
		{"FENCING (ON|OFF)", "Answer LOCK.ACQUIRE with the lock's fencing token instead of OK (needs fencing = true)."},
		{"TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]", "     [OPTIN] [OPTOUT] [NOLOOP]", "Control server assisted client side caching, in RESP3 (REDIRECT is refused)."},
		{"CACHING (YES|NO)", "Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes."},
		{"GETREDIR", "Return the client ID we are redirecting to when tracking is enabled: 0, never redirecting."},
		{"TRACKINGINFO", "Report tracking status for the current connection."},
		{"CAPA <option> [<option> ...]", "Accepted and ignored: no capability changes lockproxy's replies."},
		{"MAINT_NOTIFICATIONS (ON|OFF) [<option> <value> ...]", "Accepted and ignored: lockproxy sends no maintenance notifications."},
	},
	"command": {
		{"(no subcommand)", "Return details about all commands: name, arity, flags and key positions, as Redis 7 gives them."},
		{"COUNT", "Return the total number of commands in this lockproxy."},
		{"LIST", "Return a list of all commands in this lockproxy (filters are ignored)."},
		{"INFO [<command-name> ...]", "Return details about the given commands, or all of them when none is given."},
		{"GETKEYS <full-command>", "Return the keys from a full command."},
		{"DOCS [<command-name> ...]", "Return documentation details about commands: none."},
	},
	"cluster": {
		{"INFO", "Return information about the cluster: the lockproxy instances of cluster_nodes."},
		{"KEYSLOT <key>", "Return the hash slot for <key>."},
		{"MYID", "Return the node id."},
		{"MYSHARDID", "Return the node's shard id: each lockproxy instance is a shard of its own."},
		{"NODES", "Return cluster configuration seen by node. Output format:", "    <id> <ip:port@0> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ..."},
		{"SHARDS", "Return information about slot range mappings and the nodes associated with them."},
		{"SLOTS", "Return information about slots range mappings. Each range is served by a live lockproxy instance; every instance serves every slot."},
		{"COUNTKEYSINSLOT <slot>", "Refused: lockproxy lists locks with SCAN or LOCK.LIST instead."},
		{"GETKEYSINSLOT <slot> <count>", "Refused: lockproxy lists locks with SCAN or LOCK.LIST instead."},
	},
	"config": {
		{"GET <pattern>", "Return parameters matching the glob-like <pattern> and their values: none, as lockproxy exposes no settings."},
	},
	"script": {
		{"EXISTS <sha1> [<sha1> ...]", "Return information about the existence of the scripts in the script cache."},
		{"FLUSH [ASYNC|SYNC]", "Flush lockproxy's Lua scripts cache."},
		{"LOAD <script>", "Load a script into the scripts cache without executing it."},
	},
}

// withHelp adds the HELP subcommand to every command that has subcommands.
func withHelp(cmds map[string]*command) map[string]*command {
	for name, c := range cmds {
		if c.subs == nil {
			continue
		}
		lines := helpLines(name, subcommandHelp[name])
		c.subs["help"] = &command{name: name + "|help", arity: 2, run: func(conn redcon.Conn, _ redcon.Command) {
			conn.WriteArray(len(lines))
			for _, l := range lines {
				conn.WriteString(l)
			}
		}}
	}
	return cmds
}

// helpLines lays entries out as Redis's addReplyHelp does: a heading, then
// each usage with its description indented by four spaces.
func helpLines(name string, entries [][]string) []string {
	lines := []string{strings.ToUpper(name) + " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"}
	for _, e := range append(entries, []string{"HELP", "Prints this help."}) {
		lines = append(lines, e[0])
		for _, d := range e[1:] {
			lines = append(lines, "    "+d)
		}
	}
	return lines
}
