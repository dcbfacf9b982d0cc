package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocMapsNameEveryFile: the map in each package's doc.go ("Where things
// are") names every file of the package, so a newcomer can trust it. A
// package of one file is its own map; in test/, whose files are all tests,
// the map is the index of features to test files and names those.
func TestDocMapsNameEveryFile(t *testing.T) {
	dirs := map[string][]string{} // package directory → its files to name
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// The client programs of the compatibility suite and the
			// peers' suites are other projects' code, not packages of ours.
			if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" ||
				path == filepath.Join("test", "compat") || path == filepath.Join("test", "peers")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || name == "doc.go" {
			return nil
		}
		dir := filepath.Dir(path)
		if strings.HasSuffix(name, "_test.go") && dir != "test" {
			return nil
		}
		dirs[dir] = append(dirs[dir], name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, files := range dirs {
		if len(files) < 2 {
			continue
		}
		doc, err := os.ReadFile(filepath.Join(dir, "doc.go"))
		if err != nil {
			t.Errorf("%s: %d files and no doc.go to say where things are", dir, len(files))
			continue
		}
		for _, f := range files {
			if !strings.Contains(string(doc), f) {
				t.Errorf("%s/doc.go does not name %s", dir, f)
			}
		}
	}
}
