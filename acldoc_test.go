package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestACLListNamesEveryCommand: docs/backends.md lists what lockproxy's
// ACL user on the backends may run; every command that the engine sends,
// or that its scripts call, is on it, so that an operator who grants
// exactly the list has a proxy that works. AUTH needs no grant.
func TestACLListNamesEveryCommand(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("docs", "backends.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(doc), "**What lockproxy's user may run**")
	if !ok {
		t.Fatal("docs/backends.md has no list of what lockproxy's user may run")
	}
	list, _, _ = strings.Cut(list, "\n\n")
	granted := map[string]bool{}
	for _, m := range regexp.MustCompile("`([A-Z]+)[ `]").FindAllStringSubmatch(list, -1) {
		granted[m[1]] = true
	}

	used := map[string]string{} // command → where
	scripts, err := filepath.Glob(filepath.Join("quorum", "lua", "*.lua"))
	if err != nil {
		t.Fatal(err)
	}
	calls := regexp.MustCompile(`redis\.p?call\("([A-Za-z]+)"`)
	for _, f := range scripts {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range calls.FindAllStringSubmatch(string(src), -1) {
			used[strings.ToUpper(m[1])] = f
		}
	}
	sources, err := filepath.Glob(filepath.Join("quorum", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	sends := regexp.MustCompile(`Key(?:less)?Command\("([A-Z]+)"`)
	for _, f := range sources {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range sends.FindAllStringSubmatch(string(src), -1) {
			used[m[1]] = f
		}
	}
	if len(used) < 20 {
		t.Fatalf("found %d commands: the walk misses them", len(used))
	}
	for cmd, where := range used {
		if cmd != "AUTH" && !granted[cmd] {
			t.Errorf("%s (%s) is not in docs/backends.md's list of what lockproxy's user may run", cmd, where)
		}
	}
}
