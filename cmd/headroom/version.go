package main

import (
	"runtime/debug"
	"strings"
)

// buildVersion is set by the Makefile's build (-X main.buildVersion=...)
// from git describe: GOFLAGS=-buildvcs=false, as on this project's
// machines, leaves the go command's own stamp out.
var buildVersion string

// version is the binary's version: the Makefile's, else its module
// version, or for a build from a checkout the commit it was built from
// (and "+dirty" when the work tree had changes), as the go command stamps
// them.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	if buildVersion != "" {
		v = buildVersion
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" && (v == "" || v == "(devel)") {
		v = "devel-" + rev[:min(12, len(rev))] + dirty
	}
	return strings.TrimSpace(v + " " + info.GoVersion)
}
