package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// journalFile is the eviction journal's name in the state directory.
const journalFile = "evictions.json"

// StateLockFile, in the state directory, is locked (flock) by the agent
// whose journal it is and holds its PID.
const StateLockFile = "lock"

// ErrStateDirHeld is returned for a state directory another agent holds.
var ErrStateDirHeld = errors.New("held by another agent")

// LockStateDir makes the state directory (if missing) and takes it for
// this process until unlock: two agents on one journal would each
// overwrite the other's evictions in progress and resume them as their
// own. A directory another process holds is ErrStateDirHeld, naming its
// PID.
func LockStateDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	path := filepath.Join(dir, StateLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(holder))
			if pid == "" {
				pid = "unknown"
			}
			return nil, fmt.Errorf("state directory %s: %w (pid %s); give each agent its own (--state-dir)", dir, ErrStateDirHeld, pid)
		}
		return nil, fmt.Errorf("state directory %s: lock: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// journal keeps the evictions in progress on disk (written before the
// request goes out and when it was sent, removed at the outcome), so an
// agent started while a victim is still leaving — a restart, a DaemonSet
// rollout, a SIGKILL — resumes that eviction instead of choosing a second
// victim for the same pressure. A nil journal keeps nothing.
type journal struct {
	path   string
	log    *slog.Logger
	unlock func() // gives the state directory up

	mu      sync.Mutex
	entries map[string]journalEntry
	failed  bool // the last write failed (logged once until one succeeds)
}

// journalEntry is one eviction in progress.
type journalEntry struct {
	Workload string `json:"workload"`
	// Instance is the workload's cgroup ID when chosen: a workload made
	// again under its name is not the victim.
	Instance uint64    `json:"instance"`
	ChosenAt time.Time `json:"chosen_at"`
	// SignaledAt is when the graceful request went out (zero: perhaps not).
	SignaledAt time.Time `json:"signaled_at,omitzero"`
}

// openJournal reads the journal in dir (made if missing); the entries it
// holds are the previous agent's evictions in progress.
func openJournal(dir string, log *slog.Logger) (*journal, []journalEntry, error) {
	unlock, err := LockStateDir(dir)
	if err != nil {
		return nil, nil, err
	}
	j := &journal{path: filepath.Join(dir, journalFile), log: log, unlock: unlock, entries: map[string]journalEntry{}}
	b, err := os.ReadFile(j.path)
	if errors.Is(err, os.ErrNotExist) {
		return j, nil, nil
	}
	if err != nil {
		unlock()
		return nil, nil, fmt.Errorf("read the eviction journal: %w", err)
	}
	var entries []journalEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		// A torn or foreign file must not stop the agent: it starts with
		// no eviction in progress, and says so.
		log.Warn("the eviction journal is unreadable; starting without evictions in progress", "path", j.path, "err", err)
		return j, nil, nil
	}
	for _, e := range entries {
		j.entries[e.Workload] = e
	}
	return j, entries, nil
}

// close gives the state directory up for the next agent; the entries
// stay on disk.
func (j *journal) close() {
	if j != nil && j.unlock != nil {
		j.unlock()
	}
}

func (j *journal) put(e journalEntry) {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries[e.Workload] = e
	j.write()
}

func (j *journal) remove(workload string) {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.entries[workload]; !ok {
		return
	}
	delete(j.entries, workload)
	j.write()
}

// write replaces the file atomically (a crash leaves the old or the new).
func (j *journal) write() {
	entries := make([]journalEntry, 0, len(j.entries))
	for _, e := range j.entries {
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b journalEntry) int { return a.ChosenAt.Compare(b.ChosenAt) })
	b, _ := json.Marshal(entries)
	tmp := j.path + ".tmp"
	err := os.WriteFile(tmp, b, 0o600)
	if err == nil {
		err = os.Rename(tmp, j.path)
	}
	switch {
	case err != nil && !j.failed:
		j.log.Warn("cannot write the eviction journal; a restarted agent would not know of this eviction", "path", j.path, "err", err)
		j.failed = true
	case err == nil:
		j.failed = false
	}
}
