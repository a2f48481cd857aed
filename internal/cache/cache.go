// Package cache locates headroom's cache of built artefacts (guest images,
// later Kubernetes binaries): $XDG_CACHE_HOME/headroom, by default
// ~/.cache/headroom. Entries are keyed by the versions or content hashes
// they were built from, so a cache never needs invalidating, only pruning.
package cache

import (
	"errors"
	"os"
	"path/filepath"
)

// Dir returns the cache directory (not created).
func Dir() (string, error) {
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "headroom"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", errors.New("no cache directory: set XDG_CACHE_HOME or HOME")
	}
	return filepath.Join(home, ".cache", "headroom"), nil
}
