// Package workloadmeta is a workload's identity and importance as the
// agent's policy sees it: read from <workloads-dir>/<cgroup-name>.json
// (density writes these for its workers) or, on Kubernetes, from the pod.
// It stands apart from the agent so its parser, and its fuzz test, build
// without the agent's dependencies (the Prometheus client among them).
package workloadmeta

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/headroom-dev/headroom/internal/units"
)

// Metadata is a workload's identity and importance, read from
// <workloads-dir>/<child-cgroup-name>.json. A workload without a file has
// the zero value: lowest priority, request 0 (no swap), not protected.
type Metadata struct {
	Name string `json:"name"`
	// Priority: higher is more important; the lowest is evicted first.
	Priority int `json:"priority"`
	// MemoryRequestBytes is the request: "1Gi" or a byte count in the file.
	MemoryRequestBytes uint64 `json:"-"`
	// Protected workloads are never evicted and get no swap.
	Protected bool `json:"protected"`
	// QMPSocket names a VM's QMP socket: the agent reads the guest's
	// memory statistics through it and evicts the VM with a power-down.
	QMPSocket string `json:"qmp"`
	// SwapRule and ExternalSwapBytes are policy.Workload's: how the swap
	// allowance is set (the Kubernetes source sets them; files do not).
	SwapRule          string `json:"-"`
	ExternalSwapBytes uint64 `json:"-"`
}

// Parse parses one metadata file.
func Parse(b []byte) (Metadata, error) {
	var raw struct {
		Name          string          `json:"name"`
		Priority      int             `json:"priority"`
		MemoryRequest json.RawMessage `json:"memoryRequest"`
		Protected     bool            `json:"protected"`
		QMP           string          `json:"qmp"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Metadata{}, fmt.Errorf("parse workload metadata: %w", err)
	}
	if raw.QMP != "" && !filepath.IsAbs(raw.QMP) {
		return Metadata{}, fmt.Errorf("parse workload metadata: qmp must be an absolute socket path, got %q", raw.QMP)
	}
	m := Metadata{Name: raw.Name, Priority: raw.Priority, Protected: raw.Protected, QMPSocket: raw.QMP}
	if len(raw.MemoryRequest) > 0 && string(raw.MemoryRequest) != "null" {
		var s string
		if err := json.Unmarshal(raw.MemoryRequest, &s); err == nil {
			n, err := units.ParseBytes(s)
			if err != nil {
				return Metadata{}, fmt.Errorf("parse workload metadata: memoryRequest: %w", err)
			}
			m.MemoryRequestBytes = n
		} else {
			n, err := strconv.ParseUint(string(raw.MemoryRequest), 10, 64)
			if err != nil {
				return Metadata{}, fmt.Errorf("parse workload metadata: memoryRequest must be bytes or a size string like \"1Gi\", got %s", raw.MemoryRequest)
			}
			m.MemoryRequestBytes = n
		}
	}
	return m, nil
}

// MaxFileBytes bounds a metadata file: a larger one is refused, not read
// into memory.
const MaxFileBytes = 64 << 10

// Read reads from dir the metadata of the workload whose cgroup is named
// cgroupName; a missing file is not an error. The file is opened inside
// dir only: a symlink that leads out of it (or a name with a path in it)
// is refused, never followed. On an error the defaults are returned with
// it.
func Read(dir, cgroupName string) (Metadata, error) {
	def := Metadata{Name: cgroupName}
	root, err := os.OpenRoot(dir)
	if errors.Is(err, os.ErrNotExist) {
		return def, nil
	}
	if err != nil {
		return def, err
	}
	defer root.Close()
	f, err := root.Open(cgroupName + ".json")
	if errors.Is(err, os.ErrNotExist) {
		return def, nil
	}
	if err != nil {
		return def, fmt.Errorf("%s: %w", cgroupName+".json", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	switch {
	case err != nil:
		return def, fmt.Errorf("%s: %w", cgroupName+".json", err)
	case len(b) > MaxFileBytes:
		return def, fmt.Errorf("%s: larger than %d bytes", cgroupName+".json", MaxFileBytes)
	}
	m, err := Parse(b)
	if err != nil {
		return def, fmt.Errorf("%s: %w", cgroupName+".json", err)
	}
	if m.Name == "" {
		m.Name = cgroupName
	}
	return m, nil
}
