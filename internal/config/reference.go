package config

import (
	"fmt"
	"strings"
)

// Reference is the table of docs/configuration.md: every key of keys, in
// its order, with its flag, environment variable, type, default and what a
// reload does with it. The page is this text between two marker lines;
// TestConfigReference holds it to the table, so the reference cannot drift
// from the keys lockproxy reads.
func Reference() string {
	var b strings.Builder
	b.WriteString("On reload (SIGHUP), a changed key is **applied** to new connections\n" +
		"without closing any, or kept at its running value until a **restart**;\n" +
		"**restart, engine** keys are the backend set and the engine's settings\n" +
		"([Reloading the configuration](#reloading-the-configuration)).\n\n")
	b.WriteString("| key | flag, environment | type | default | on reload | meaning |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, k := range keys {
		v := k.value()
		name := k.name
		switch v.(type) {
		case *usersValue, *groupsValue:
			name = "[[" + name + "]]" // a TOML table, one per entry
		}
		def := "empty"
		if s := v.String(); s != "" {
			def = "`" + s + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `-%s`, `%s` | %s | %s | %s | %s |\n",
			name, k.flag(), k.env(), tableCell(v.kind()), def, reloadText[k.reload], tableCell(k.help))
	}
	return b.String()
}

// reloadText is the "on reload" column's word for each class.
var reloadText = map[OnReload]string{Live: "applied", Restart: "restart", Engine: "restart, engine"}

// tableCell escapes what would end a Markdown table cell.
func tableCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
