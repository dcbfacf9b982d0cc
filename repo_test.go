package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNoLargeTrackedFiles: no file git tracks is over 1 MB unless it is
// test data: a build output committed by accident (a 12.5 MB bench binary
// once was) weighs on every clone for good.
func TestNoLargeTrackedFiles(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, path := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		name := string(path)
		if strings.Contains(name, "/testdata/") || strings.HasPrefix(name, "testdata/") {
			continue
		}
		info, err := os.Stat(name)
		if err != nil {
			continue // deleted in the working tree
		}
		if info.Size() > 1<<20 {
			t.Errorf("%s is tracked and %d bytes: over 1 MB and not test data", name, info.Size())
		}
	}
}
