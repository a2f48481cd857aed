// Package guest is the micro-VM guest's /init — headroom itself, running as
// PID 1 — and the interface the host and the guest share: the kernel
// command-line keys that carry the guest command, the virtio-serial ports,
// and the events /init reports on its control port.
//
// /init mounts proc, sys, dev and cgroup2 (memory controller on), loads
// the image's kernel modules, names the virtio-serial ports under
// /dev/virtio-ports as udev would, turns on a guest swap disk if the host
// gave one, runs the guest command with its output on the stdout and
// stderr ports, stops it with SIGTERM when the ACPI power button is
// pressed (QMP system_powerdown), and powers the machine off when it ends.
package guest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// Virtio-serial port names. The host attaches the first three to every
// guest; the controller port only when the guest command joins a
// controller (it is `headroom load --controller serial:<ControllerPortPath>`).
const (
	PortControl    = "org.headroom.control"
	PortStdout     = "org.headroom.stdout"
	PortStderr     = "org.headroom.stderr"
	PortController = "org.headroom.controller"
)

// PortDir is where /init links each port by its name, as udev does.
const PortDir = "/dev/virtio-ports"

// ControllerPortPath is the controller port's path inside the guest.
const ControllerPortPath = PortDir + "/" + PortController

// Kernel command-line keys read by /init.
const (
	// ArgsKey carries the guest command (EncodeArgs).
	ArgsKey = "headroom.args"
	// PortsKey is how many virtio-serial ports the host attached; /init
	// waits for all of them before it starts the command.
	PortsKey = "headroom.ports"
	// SwapKey names a block device /init enables as swap ("vda").
	SwapKey = "headroom.swap"
	// CacheKey names a block device /init reads whole before the command
	// starts, so the guest begins with that much clean page cache (memory
	// it can drop at once, the kind a balloon reclaims for free).
	CacheKey = "headroom.cache"
	// GraceKey is how many seconds the command gets between SIGTERM (on a
	// power-down request) and SIGKILL.
	GraceKey = "headroom.grace"
)

// Image layout.
const (
	// ModulesDir holds the kernel modules; ModulesOrder lists their names
	// in load order, one per line.
	ModulesDir   = "/lib/modules"
	ModulesOrder = ModulesDir + "/load.order"
	// InitPath is headroom itself, which runs other headroom subcommands.
	InitPath = "/init"
)

// Event is one JSON line /init writes on the control port.
type Event struct {
	// Event is EventBooted, EventStarted, EventExited or EventFailed.
	Event string `json:"event"`
	// UptimeSeconds is the guest's uptime when the event was sent.
	UptimeSeconds float64 `json:"uptime_seconds"`
	PID           int     `json:"pid,omitempty"`
	// ExitStatus is the command's exit status (128+n if killed by signal n).
	ExitStatus *int   `json:"exit_status,omitempty"`
	Signal     string `json:"signal,omitempty"`
	// Error says why /init could not run the command.
	Error string `json:"error,omitempty"`
}

// Events, in the order they are sent.
const (
	EventBooted  = "booted"  // /init runs: mounts done, modules loaded, ports found
	EventStarted = "started" // the guest command was started
	EventExited  = "exited"  // the guest command ended; power-off follows
	EventFailed  = "failed"  // /init could not start the command; power-off follows
)

// ParseEvent decodes one control-port line.
func ParseEvent(line []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(line, &e); err != nil {
		return Event{}, fmt.Errorf("guest event %q: %w", truncate(line), err)
	}
	switch e.Event {
	case EventBooted, EventStarted, EventFailed:
	case EventExited:
		if e.ExitStatus == nil {
			return Event{}, fmt.Errorf("guest event %q: exited without a status", truncate(line))
		}
	default:
		return Event{}, fmt.Errorf("guest event %q: unknown event", truncate(line))
	}
	return e, nil
}

// EncodeArgs renders a command as one kernel command-line word.
func EncodeArgs(args []string) string {
	b, _ := json.Marshal(args)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeArgs reverses EncodeArgs.
func DecodeArgs(s string) ([]string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ArgsKey, err)
	}
	var args []string
	if err := json.Unmarshal(b, &args); err != nil {
		return nil, fmt.Errorf("%s: %w", ArgsKey, err)
	}
	if len(args) == 0 || args[0] == "" {
		return nil, fmt.Errorf("%s: empty command", ArgsKey)
	}
	return args, nil
}

// ParseCmdline splits /proc/cmdline into key=value pairs (a bare word has
// an empty value; the last of repeated keys wins).
func ParseCmdline(s string) map[string]string {
	out := map[string]string{}
	for _, w := range strings.Fields(s) {
		k, v, _ := strings.Cut(w, "=")
		out[k] = v
	}
	return out
}

func truncate(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}
