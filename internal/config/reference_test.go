package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md's generated table from the key table")

const (
	referenceFile  = "../../docs/configuration.md"
	referenceBegin = "<!-- generated from internal/config/keys.go: go test ./internal/config -run TestConfigReference -update -->\n"
	referenceEnd   = "<!-- end of generated table -->\n"
)

// TestConfigReference: docs/configuration.md's table, between its two
// marker lines, is what Reference renders from the key table. With
// -update it rewrites that part of the page and keeps the prose around it.
func TestConfigReference(t *testing.T) {
	page, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(page), referenceBegin)
	got, after, ok2 := strings.Cut(rest, referenceEnd)
	if !ok || !ok2 {
		t.Fatalf("%s lacks the marker lines %q and %q around its generated table", referenceFile, referenceBegin, referenceEnd)
	}
	want := Reference()
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(referenceFile, []byte(before+referenceBegin+want+referenceEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Fatalf("%s differs from the key table at line %d of its generated table:\npage: %s\nkeys: %s\nregenerate it: go test ./internal/config -run TestConfigReference -update", referenceFile, i+1, g, w)
		}
	}
}
