package main

import (
	"testing"
)

// TestBuildInfo: a binary built without a stamped version still says
// something more than "(devel)", and -version's line has every part.
func TestBuildInfo(t *testing.T) {
	b := buildInfo()
	if b.Version == "" || b.Version == "(devel)" || b.Revision == "" {
		t.Fatalf("build info: %+v", b)
	}
	if exp, got := "lockproxy v1.2.3 (commit 0123456789ab, go1.99, linux/arm64)",
		(build{"v1.2.3", "0123456789ab", "go1.99", "linux/arm64"}).String(); exp != got {
		t.Fatalf("want %q, got %q", exp, got)
	}
}
