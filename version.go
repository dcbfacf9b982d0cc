package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and revision say which release and commit this binary is,
// stamped at build time: go build -ldflags "-X main.version=v0.1.0
// -X main.revision=0123456789ab", as make release does. Left empty,
// buildInfo falls back to what the Go toolchain recorded, which is nothing
// when VCS stamping is off (-buildvcs=false, a source tarball).
var version, revision string

// build describes this binary: what -version prints, INFO's
// lockproxy_version and the lockproxy_build_info metric all read it, so
// that the three cannot disagree.
type build struct {
	Version   string // v0.1.0, a Go pseudo-version, or devel-<revision>
	Revision  string // the VCS commit, 12 hex digits and -dirty when built from a modified tree; "unknown" without VCS information
	GoVersion string // go1.26.8
	Platform  string // linux/amd64
}

// buildInfo reads the stamped version and the toolchain's build
// information. go install module@v0.1.0 records the module version;
// go build in a git checkout records a pseudo-version and the commit
// (Go 1.24 on); a build with neither gets devel-<commit> rather than
// "(devel)" alone, which says nothing about what is running.
func buildInfo() build {
	b := build{Version: version, Revision: revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	var module string
	if bi, ok := debug.ReadBuildInfo(); ok {
		module = bi.Main.Version
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if b.Revision == "" && rev != "" {
			b.Revision = rev[:min(12, len(rev))]
			if modified == "true" {
				b.Revision += "-dirty"
			}
		}
	}
	if b.Revision == "" {
		b.Revision = "unknown"
	}
	switch {
	case b.Version != "":
	case module != "" && module != "(devel)":
		b.Version = module
	case b.Revision != "unknown":
		b.Version = "devel-" + b.Revision
	default:
		b.Version = "devel"
	}
	return b
}

// String is the one line -version prints.
func (b build) String() string {
	return fmt.Sprintf("lockproxy %s (commit %s, %s, %s)", b.Version, b.Revision, b.GoVersion, b.Platform)
}
