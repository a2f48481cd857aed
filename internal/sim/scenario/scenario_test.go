package scenario

import (
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/headroom-dev/headroom/internal/sim"
	"github.com/headroom-dev/headroom/internal/sim/machine"
)

// Every parameter declares its flag, key, unit, group and help once, and
// what is generated from the declaration agrees with it: the flags, the
// run.json record, the reference table and the model fields named.
func TestDeclarationsAgree(t *testing.T) {
	ps := All()
	if len(ps) < 40 {
		t.Fatalf("%d parameters: the declaration lost some", len(ps))
	}
	flags, keys := map[string]bool{}, map[string]bool{}
	for _, p := range ps {
		switch {
		case p.Flag == "" || p.Key == "" || p.Unit == "" || p.Help == "":
			t.Errorf("%+v: a tag is missing", p)
		case flags[p.Flag] || keys[p.Key]:
			t.Errorf("--%s (%s): declared twice", p.Flag, p.Key)
		case groupTitles[p.Group] == "":
			t.Errorf("--%s: group %q has no title", p.Flag, p.Group)
		case len(p.Help) > 120 || strings.Contains(p.Help, "\n"):
			t.Errorf("--%s: help is %d characters, want one line of at most 120 (pflag adds the default)", p.Flag, len(p.Help))
		}
		flags[p.Flag], keys[p.Key] = true, true
		if p.Model != "" && !modelFieldExists(p.Model) {
			t.Errorf("--%s: model field %s does not exist in sim.Params", p.Flag, p.Model)
		}
	}
	v := Default()
	fl := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	v.Register(fl)
	n := 0
	fl.VisitAll(func(f *pflag.Flag) {
		n++
		if !flags[f.Name] {
			t.Errorf("flag --%s is not declared", f.Name)
		}
		if p, _ := Lookup(f.Name); f.DefValue != p.Default {
			t.Errorf("--%s: flag default %q, declared %q", f.Name, f.DefValue, p.Default)
		}
	})
	if n != len(ps) {
		t.Errorf("%d flags for %d parameters", n, len(ps))
	}
	rec := v.Record()
	for k := range rec {
		if !keys[k] {
			t.Errorf("run.json key %q is not declared", k)
		}
	}
	for _, p := range ps {
		if _, ok := rec[p.Key]; !ok {
			t.Errorf("--%s: run.json has no %q", p.Flag, p.Key)
		}
		if !strings.Contains(Table(), "`"+p.Flag+"`") {
			t.Errorf("--%s: not in the reference table", p.Flag)
		}
	}
	for name := range Measured(machine.Figures{}) {
		if !flags[name] {
			t.Errorf("--machine this sets %q, which is no parameter", name)
		}
	}
}

// modelFieldExists: path ("Node.Swap.ReadIOPS") names a field of
// sim.Params.
func modelFieldExists(path string) bool {
	t := reflect.TypeOf(sim.Params{})
	for _, name := range strings.Split(path, ".") {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		f, ok := t.FieldByName(name)
		if !ok {
			return false
		}
		t = f.Type
	}
	return true
}

// A flag set on the command line reaches the model, and one the flags
// refuse is named.
func TestParamsFromValues(t *testing.T) {
	v := Default()
	fl := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	v.Register(fl)
	for _, kv := range [][2]string{{"swap", "64Gi"}, {"swap-latency", "120us"}, {"paging-cpu", "2:10us,8:20us"}, {"worker-kind", "process"}} {
		if err := fl.Set(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	p, err := v.Params(nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Node.Swap.SizeBytes != 64<<30 || p.Node.Swap.LatencySeconds != 120e-6 || len(p.Node.PagingCPU) != 2 || !p.VM.Process {
		t.Errorf("the flags did not reach the model: %+v %+v", p.Node.Swap, p.VM)
	}
	for _, c := range []struct {
		set  func(*Values)
		want string
	}{
		{func(v *Values) { v.SystemReserve = v.NodeMemory }, "--system-reserve"},
		{func(v *Values) { v.SwapReadIOPS, v.Swap = 0, 1<<30 }, "--swap-read-iops"},
		{func(v *Values) { v.Swap = 0; v.SwapTier = "zswap:1Gi" }, "--swap-tier"},
		{func(v *Values) { v.GuestCache = 1 << 20; v.WorkerKind = "process" }, "--guest-cache"},
		{func(v *Values) { v.Balloon = true }, "--balloon needs --agent"},
		// A grammar's error: the model's parser says what is wrong, the
		// flag is named once, in front.
		{func(v *Values) { v.SwapDepths = "4:1/1,2:1/1" }, `--swap-depths "4:1/1,2:1/1": want`},
		{func(v *Values) { v.TouchRate = "fast" }, `--touch-rate "fast": want`},
		{func(v *Values) { v.SwapReadPages = "0" }, `--swap-read-pages "0": want`},
		{func(v *Values) { v.SwapWritePages = "2:8,1:8" }, `--swap-write-pages "2:8,1:8": want`},
		{func(v *Values) { v.PagingCPU = "-1us" }, `--paging-cpu "-1us": want`},
		{func(v *Values) { v.RunQueueWait = "8:40us,2:5us" }, `--run-queue-wait "8:40us,2:5us": want`},
		{func(v *Values) { v.SwapTier = "zcache:1Gi" }, `--swap-tier "zcache:1Gi": unknown tier`},
		{func(v *Values) { v.NodeMemory, v.SwapTier = 0, "zswap" }, `--swap-tier "zswap": a zswap pool sized by max_pool_percent needs the node's RAM (--node-memory)`},
	} {
		v := Default()
		c.set(&v)
		_, err := v.Params(nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Node.") || strings.Contains(err.Error(), "VM.") ||
			strings.Count(err.Error(), "--"+strings.Fields(strings.TrimPrefix(c.want, "--"))[0]) > 1 {
			t.Errorf("want an error naming %s, got %v", c.want, err)
		}
	}
}
