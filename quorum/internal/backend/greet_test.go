package backend

import (
	"maps"
	"testing"
	"time"
)

func TestParseServerInfo(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n"
	si, err := parseServerInfo(info)
	if err != nil || si.RunID != "abc123" || si.Uptime != 42*time.Second || si.Version != "7.0.15" {
		t.Fatalf("got %+v, %v", si, err)
	}
	for _, bad := range []string{"", "run_id:x\r\n", "uptime_in_seconds:1\r\n", "run_id:x\r\nuptime_in_seconds:soon\r\n"} {
		if _, err := parseServerInfo(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// TestCommandsKnown: COMMAND INFO tells which commands a server knows; an
// answer of any other shape tells nothing.
func TestCommandsKnown(t *testing.T) {
	names := []string{"PEXPIRETIME"}
	for _, tc := range []struct {
		name string
		r    Reply
		want map[string]bool
	}{
		{"known", Reply{kind: '*', array: []Reply{{kind: '*', array: []Reply{{kind: '$', str: "pexpiretime"}, {kind: ':', int: 2}}}}}, map[string]bool{"PEXPIRETIME": true}},
		{"unknown", Reply{kind: '*', array: []Reply{{}}}, map[string]bool{"PEXPIRETIME": false}},
		{"denied", Reply{kind: '-', str: "NOPERM this user has no permissions to run the 'command' command"}, nil},
		{"another command", Reply{kind: '*', array: []Reply{{kind: '*', array: []Reply{{kind: '$', str: "get"}}}}}, map[string]bool{}},
		{"too few", Reply{kind: '*'}, nil},
	} {
		if got := commandsKnown(tc.r, names); !maps.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
