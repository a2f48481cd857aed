package qmp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Event names headroom acts on.
const (
	EventShutdown      = "SHUTDOWN"
	EventStop          = "STOP"
	EventResume        = "RESUME"
	EventPowerdown     = "POWERDOWN"
	EventBalloonChange = "BALLOON_CHANGE"
	EventGuestPanicked = "GUEST_PANICKED"
)

// Status is query-status's answer.
type Status struct {
	Running bool   `json:"running"`
	Status  string `json:"status"` // "running", "paused", "shutdown", ...
}

// QueryStatus reports whether the guest's vCPUs run.
func (c *Client) QueryStatus(ctx context.Context) (Status, error) {
	var s Status
	err := c.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// QueryBalloon returns the guest's current memory as the balloon sees it:
// its RAM minus the balloon's size, in bytes.
func (c *Client) QueryBalloon(ctx context.Context) (actualBytes uint64, err error) {
	var r struct {
		Actual uint64 `json:"actual"`
	}
	err = c.Execute(ctx, "query-balloon", nil, &r)
	return r.Actual, err
}

// QueryMemorySizeSummary returns the guest's RAM as configured (its
// base memory, without hot-plugged memory).
func (c *Client) QueryMemorySizeSummary(ctx context.Context) (baseBytes uint64, err error) {
	var r struct {
		BaseMemory uint64 `json:"base-memory"`
	}
	err = c.Execute(ctx, "query-memory-size-summary", nil, &r)
	return r.BaseMemory, err
}

// Balloon asks the guest to shrink or grow to targetBytes of memory; the
// guest driver moves towards it and QEMU reports progress in
// BALLOON_CHANGE events.
func (c *Client) Balloon(ctx context.Context, targetBytes uint64) error {
	return c.Execute(ctx, "balloon", map[string]uint64{"value": targetBytes}, nil)
}

// BalloonActualBytes decodes a BALLOON_CHANGE event's data.
func BalloonActualBytes(ev Event) (uint64, error) {
	var d struct {
		Actual *uint64 `json:"actual"`
	}
	if err := json.Unmarshal(ev.Data, &d); err != nil || d.Actual == nil {
		return 0, fmt.Errorf("qmp: %s event without an actual size: %s", ev.Name, truncate(ev.Data))
	}
	return *d.Actual, nil
}

// SystemPowerdown presses the guest's ACPI power button; a guest that
// handles it shuts down, and QEMU then exits (with -no-shutdown unset).
func (c *Client) SystemPowerdown(ctx context.Context) error {
	return c.Execute(ctx, "system_powerdown", nil, nil)
}

// Quit ends QEMU at once, without asking the guest.
func (c *Client) Quit(ctx context.Context) error {
	err := c.Execute(ctx, "quit", nil, nil)
	if err != nil {
		// QEMU may close the socket before its reply is read.
		select {
		case <-c.Done():
			return nil
		default:
		}
	}
	return err
}

// QOMGet reads property of the QOM object at path into result.
func (c *Client) QOMGet(ctx context.Context, path, property string, result any) error {
	return c.Execute(ctx, "qom-get", map[string]string{"path": path, "property": property}, result)
}

// QOMSet sets property of the QOM object at path.
func (c *Client) QOMSet(ctx context.Context, path, property string, value any) error {
	return c.Execute(ctx, "qom-set", map[string]any{"path": path, "property": property, "value": value}, nil)
}

// SetGuestStatsPollingInterval makes the balloon device at path (for
// example /machine/peripheral/balloon0) ask the guest for memory
// statistics every seconds (0 stops polling).
func (c *Client) SetGuestStatsPollingInterval(ctx context.Context, path string, seconds int) error {
	return c.QOMSet(ctx, path, "guest-stats-polling-interval", seconds)
}

// GuestStats is the guest's own view of its memory, as its balloon driver
// reports it. A field the guest does not report is -1.
type GuestStats struct {
	// LastUpdate is when the guest last reported (host clock); zero if it
	// has not reported yet.
	LastUpdate      time.Time `json:"last_update"`
	SwapInBytes     int64     `json:"swap_in_bytes"`
	SwapOutBytes    int64     `json:"swap_out_bytes"`
	MajorFaults     int64     `json:"major_faults"`
	MinorFaults     int64     `json:"minor_faults"`
	FreeBytes       int64     `json:"free_bytes"`
	TotalBytes      int64     `json:"total_bytes"`
	AvailableBytes  int64     `json:"available_bytes"`
	DiskCachesBytes int64     `json:"disk_caches_bytes"`
}

// GuestStats reads the balloon device's latest guest statistics.
func (c *Client) GuestStats(ctx context.Context, path string) (GuestStats, error) {
	var raw json.RawMessage
	if err := c.QOMGet(ctx, path, "guest-stats", &raw); err != nil {
		return GuestStats{}, err
	}
	return ParseGuestStats(raw)
}

// ParseGuestStats decodes the guest-stats property.
func ParseGuestStats(b []byte) (GuestStats, error) {
	var raw struct {
		Stats      map[string]json.Number `json:"stats"`
		LastUpdate int64                  `json:"last-update"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return GuestStats{}, fmt.Errorf("qmp: decode guest-stats: %w", err)
	}
	if raw.Stats == nil {
		return GuestStats{}, fmt.Errorf("qmp: guest-stats without stats: %s", truncate(b))
	}
	// QEMU sends "not reported" as -1 converted to uint64 (2^64-1).
	stat := func(key string) int64 {
		if v, err := strconv.ParseInt(raw.Stats[key].String(), 10, 64); err == nil && v >= 0 {
			return v
		}
		return -1
	}
	s := GuestStats{
		SwapInBytes: stat("stat-swap-in"), SwapOutBytes: stat("stat-swap-out"),
		MajorFaults: stat("stat-major-faults"), MinorFaults: stat("stat-minor-faults"),
		FreeBytes: stat("stat-free-memory"), TotalBytes: stat("stat-total-memory"),
		AvailableBytes: stat("stat-available-memory"), DiskCachesBytes: stat("stat-disk-caches"),
	}
	if raw.LastUpdate > 0 {
		s.LastUpdate = time.Unix(raw.LastUpdate, 0)
	}
	return s, nil
}
