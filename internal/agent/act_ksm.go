package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/policy"
)

// ksmActuator sets ksmd's pace through sysfs and puts back what it found
// when the agent stops.
type ksmActuator struct {
	dir   string
	saved *host.KSM // the settings before the agent's first change
}

// apply writes a setting: the pace first, then run, so ksmd never runs at
// a pace it was not given.
func (k *ksmActuator) apply(s policy.KSMSetting) error {
	if k == nil {
		return errors.New("KSM is off")
	}
	if k.saved == nil {
		cur, err := host.ReadKSMDir(k.dir)
		if err != nil {
			return err
		}
		k.saved = &cur
	}
	if s.AdvisorMode != "" {
		if err := k.write("advisor_mode", s.AdvisorMode); err != nil {
			return err
		}
	}
	if s.Run == 1 && s.PagesToScan > 0 {
		if err := k.write("sleep_millisecs", strconv.FormatUint(s.SleepMillisecs, 10)); err != nil {
			return err
		}
		if err := k.write("pages_to_scan", strconv.FormatUint(s.PagesToScan, 10)); err != nil {
			return err
		}
	}
	return k.write("run", strconv.Itoa(s.Run))
}

// restore puts back the settings found before the first change; merged
// pages stay merged (run 0 stops scanning without unmerging).
func (k *ksmActuator) restore() error {
	if k.saved == nil {
		return nil
	}
	s := k.saved
	var first error
	for _, w := range []struct{ name, value string }{
		{"run", "0"},
		// The advisor refuses a manual pace while it is on: its mode first.
		{"advisor_mode", s.AdvisorMode},
		{"pages_to_scan", strconv.FormatUint(s.PagesToScan, 10)},
		{"sleep_millisecs", strconv.FormatUint(s.SleepMillisecs, 10)},
		{"run", strconv.Itoa(s.Run)},
	} {
		if w.value == "" {
			continue
		}
		if err := k.write(w.name, w.value); err != nil && first == nil {
			first = err
		}
	}
	k.saved = nil
	return first
}

func (k *ksmActuator) write(name, value string) error {
	if err := os.WriteFile(filepath.Join(k.dir, name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("set KSM %s to %s: %w", name, value, err)
	}
	return nil
}
