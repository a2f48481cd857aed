package guest

import (
	"slices"
	"strings"
	"testing"
)

func TestArgsRoundTrip(t *testing.T) {
	for _, args := range [][]string{
		{"load", "--size", "256Mi", "--scan", "random"},
		{"/bin/sh", "-c", "echo 'a b'; exit 3"},
		{"load", "--label", "ünïcode = spaces\ttabs"},
	} {
		enc := EncodeArgs(args)
		if strings.ContainsAny(enc, " \t\n\"=") {
			t.Errorf("%q encodes to %q, which is not one kernel command-line word", args, enc)
		}
		got, err := DecodeArgs(enc)
		if err != nil || !slices.Equal(got, args) {
			t.Errorf("round trip of %q: %q, %v", args, got, err)
		}
	}
	for _, bad := range []string{"", "!!!", EncodeArgs(nil), EncodeArgs([]string{""})} {
		if _, err := DecodeArgs(bad); err == nil {
			t.Errorf("DecodeArgs(%q) accepted", bad)
		}
	}
}

func FuzzDecodeArgs(f *testing.F) {
	f.Add(EncodeArgs([]string{"load", "--size", "1Gi"}))
	f.Add("WyIiXQ")
	f.Fuzz(func(t *testing.T, s string) {
		args, err := DecodeArgs(s)
		if err != nil {
			return
		}
		if len(args) == 0 || args[0] == "" {
			t.Fatalf("empty command decoded from %q", s)
		}
		again, err := DecodeArgs(EncodeArgs(args))
		if err != nil || !slices.Equal(again, args) {
			t.Fatalf("re-encoding %q fails: %v", args, err)
		}
	})
}

func TestParseEvent(t *testing.T) {
	e, err := ParseEvent([]byte(`{"event":"exited","uptime_seconds":4.5,"exit_status":3}`))
	if err != nil || e.Event != EventExited || *e.ExitStatus != 3 || e.UptimeSeconds != 4.5 {
		t.Errorf("got %+v, %v", e, err)
	}
	for _, bad := range []string{`{"event":"exited"}`, `{"event":"rebooted"}`, `nope`} {
		if _, err := ParseEvent([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func FuzzParseEvent(f *testing.F) {
	f.Add([]byte(`{"event":"booted","uptime_seconds":1.2}`))
	f.Add([]byte(`{"event":"exited","exit_status":0,"signal":"terminated"}`))
	f.Add([]byte(`{"event":"failed","error":"mount"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseEvent(b)
		if err != nil {
			return
		}
		if e.Event == EventExited && e.ExitStatus == nil {
			t.Fatal("exited without a status")
		}
	})
}

func TestParseCmdlineAndModuleParams(t *testing.T) {
	kv := ParseCmdline("console=ttyS0 quiet headroom.ports=4 virtio_mmio.device=4K@0xfeb00000:12 virtio_mmio.force_legacy=1 panic=-1\n")
	if kv["console"] != "ttyS0" || kv["headroom.ports"] != "4" || kv["panic"] != "-1" {
		t.Errorf("parsed %v", kv)
	}
	if _, ok := kv["quiet"]; !ok {
		t.Error("bare word lost")
	}
	got := strings.Fields(moduleParams(kv, "virtio_mmio"))
	slices.Sort(got)
	if !slices.Equal(got, []string{"device=4K@0xfeb00000:12", "force_legacy=1"}) {
		t.Errorf("virtio_mmio params %q", got)
	}
	if p := moduleParams(kv, "virtio"); p != "" {
		t.Errorf("virtio got %q: prefixes must match whole module names", p)
	}
}

// Only a guest's /init is one: headroom as a container's PID 1 runs its
// command line.
func TestIsInit(t *testing.T) {
	for _, tt := range []struct {
		pid  int
		args []string
		want bool
	}{
		{1, []string{InitPath}, true},
		{1, []string{"/headroom", "agent"}, false},
		{1, []string{"headroom", "load"}, false},
		{1, nil, false},
		{4242, []string{InitPath}, false},
	} {
		if got := isInit(tt.pid, tt.args); got != tt.want {
			t.Errorf("isInit(%d, %q) = %v", tt.pid, tt.args, got)
		}
	}
}
