package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/headroom-dev/headroom/internal/agent"
	"github.com/headroom-dev/headroom/internal/kube"
	"github.com/headroom-dev/headroom/internal/libvirt"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/refdoc"
	"github.com/headroom-dev/headroom/internal/results"
	"github.com/headroom-dev/headroom/internal/sim/scenario"
)

// updateReference rewrites docs/reference from the code (make docs).
var updateReference = flag.Bool("update-reference", false, "rewrite docs/reference from the code")

const referenceDir = "../../docs/reference"

// TestReferenceIsUpToDate generates the reference — every command's flags
// (markdown and man pages, by cobra's generator), the agent's configuration
// keys, its metrics, the decision log's and the results' schemas — and
// fails when the committed docs/reference differs: the reference never
// drifts from the code. `make docs` rewrites it.
func TestReferenceIsUpToDate(t *testing.T) {
	got := t.TempDir()
	if err := writeReference(got); err != nil {
		t.Fatal(err)
	}
	if *updateReference {
		if err := os.RemoveAll(referenceDir); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(referenceDir, os.DirFS(got)); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := treeFiles(referenceDir)
	if err != nil {
		t.Fatalf("read the committed reference: %v (run make docs)", err)
	}
	have, err := treeFiles(got)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range have {
		switch w, ok := want[name]; {
		case !ok:
			t.Errorf("docs/reference/%s is missing: run make docs", name)
		case !bytes.Equal(w, b):
			t.Errorf("docs/reference/%s differs from what the code generates: run make docs", name)
		}
	}
	for name := range want {
		if _, ok := have[name]; !ok {
			t.Errorf("docs/reference/%s is no longer generated: run make docs", name)
		}
	}
}

func treeFiles(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		out[rel] = b
		return err
	})
	return out, err
}

// TestHelpIsOneLineAFlag: every flag's help is one line, short enough to
// read in a terminal, says what the flag is for, and names no value.
func TestHelpIsOneLineAFlag(t *testing.T) {
	const maxUsage = 160
	walkCommands(newRootCommand(), func(c *cobra.Command) {
		// pflag adds "(default X)" unless X reads as zero ("0", "", false).
		for _, line := range strings.Split(c.LocalFlags().FlagUsages(), "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("%s: a default said twice: %s", c.CommandPath(), strings.TrimSpace(line))
			}
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			switch {
			case strings.Contains(f.Usage, "\n"):
				t.Errorf("%s --%s: help spans lines", c.CommandPath(), f.Name)
			case len(f.Usage) > maxUsage:
				t.Errorf("%s --%s: help is %d characters (over %d): say the rest in the guide", c.CommandPath(), f.Name, len(f.Usage), maxUsage)
			case f.Usage == "":
				t.Errorf("%s --%s: no help", c.CommandPath(), f.Name)
			case strings.Contains(f.Usage, "`"):
				// pflag shows a backquoted word as the value's name.
				t.Errorf("%s --%s: help quotes a word in backquotes, which --help shows as the value (--%s %s)", c.CommandPath(), f.Name, f.Name, strings.Split(f.Usage, "`")[1])
			}
		})
	})
}

func walkCommands(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walkCommands(sub, f)
	}
}

// undocumented are the schema fields without a doc comment, found while
// writing the reference: each key must say what it is.
var undocumented []string

func writeReference(dir string) error {
	undocumented = nil
	root := newRootCommand()
	root.Version = "" // a build's version is not part of the reference
	root.DisableAutoGenTag = true
	root.InitDefaultCompletionCmd()
	walkCommands(root, func(c *cobra.Command) { c.DisableAutoGenTag = true })
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		return err
	}
	man := filepath.Join(dir, "man")
	if err := os.MkdirAll(man, 0o755); err != nil {
		return err
	}
	date := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // fixed: the pages do not change with the day
	if err := doc.GenManTree(root, &doc.GenManHeader{Title: "HEADROOM", Section: "1", Source: "headroom", Date: &date}, man); err != nil {
		return err
	}
	docs, err := refdoc.ParseDocs("../../internal/agent", "../../internal/loop", "../../internal/policy", "../../internal/results")
	if err != nil {
		return err
	}
	for name, write := range map[string]func(refdoc.FieldDocs) (string, error){
		"agent-config.md":   agentConfigReference,
		"metrics.md":        func(refdoc.FieldDocs) (string, error) { return metricsReference() },
		"decisions.md":      func(d refdoc.FieldDocs) (string, error) { return decisionsReference(d), nil },
		"results.md":        func(d refdoc.FieldDocs) (string, error) { return resultsReference(d), nil },
		"sim-parameters.md": func(refdoc.FieldDocs) (string, error) { return simParametersReference(), nil },
	} {
		text, err := write(docs)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	if len(undocumented) > 0 {
		return fmt.Errorf("fields without a doc comment: %s", strings.Join(undocumented, ", "))
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(referenceIndex(root)), 0o644)
}

const generatedNote = "<!-- Generated from the code by `make docs`; do not edit. -->\n\n"

func referenceIndex(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString(generatedNote + "# headroom reference\n\n")
	b.WriteString("Generated from the code; `make check` fails when this copy differs from what the code generates.\n\n")
	b.WriteString("## Commands\n\n")
	walkCommands(root, func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c != root {
			return
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md"
		fmt.Fprintf(&b, "- [%s](%s): %s\n", c.CommandPath(), name, c.Short)
	})
	b.WriteString("\nMan pages of the same: [man/](man/).\n\n## Schemas and keys\n\n")
	b.WriteString("- [agent-config.md](agent-config.md): every key of the agent's configuration, its default, flag and environment variable\n")
	b.WriteString("- [metrics.md](metrics.md): every metric the agent serves at `/metrics`\n")
	b.WriteString("- [decisions.md](decisions.md): the decision log's JSON lines (stdout, `/v1/decisions`)\n")
	b.WriteString("- [results.md](results.md): `run.json` and the other result files of `density` and `sim`\n")
	b.WriteString("- [sim-parameters.md](sim-parameters.md): every parameter of `headroom sim`: its flag and scenario key, run.json key, unit, default\n")
	return b.String()
}

// agentConfigReference lists every configuration key with its default,
// the flag bound to it and the wasp-agent variable that sets it.
func agentConfigReference(docs refdoc.FieldDocs) (string, error) {
	def := agent.DefaultConfig()
	flagOf := map[uintptr]string{}
	for _, f := range agentConfigFlags() {
		flagOf[reflect.ValueOf(f.field(&def)).Pointer()] = "--" + f.name
	}
	envOf := map[string]string{}
	for _, e := range agent.WaspEnv {
		envOf[e.Key] = e.Name
	}
	var rows [][]string
	bound := 0
	for _, f := range refdoc.Fields(reflect.ValueOf(&def).Elem(), docs) {
		if f.Doc == "" {
			undocumented = append(undocumented, "agent.Config."+f.GoField)
		}
		fl := flagOf[f.Value.Addr().Pointer()]
		if fl != "" {
			bound++
		}
		rows = append(rows, []string{"`" + f.Key + "`", f.Type, "`" + defaultText(f.Value) + "`", fl, envOf[f.Key], f.Doc})
	}
	if bound != len(flagOf) {
		return "", fmt.Errorf("%d agent flags, %d of them bound to a configuration key", len(flagOf), bound)
	}
	return generatedNote + "# headroom agent: configuration keys\n\n" +
		"Each layer overrides the one before: the defaults below, the YAML file of `--config`, " +
		"wasp-agent's environment variables, then the flags given. `headroom agent --print-config` prints the result. " +
		"Keys in seconds take durations on their flags (`250ms`, `30s`); keys in bytes take sizes (`16Mi`).\n\n" +
		refdoc.Table([]string{"key", "type", "default", "flag", "environment", "meaning"}, rows), nil
}

func defaultText(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Slice:
		var parts []string
		for i := range v.Len() {
			parts = append(parts, fmt.Sprint(v.Index(i).Interface()))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case reflect.String:
		return fmt.Sprintf("%q", v.String())
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

func metricsReference() (string, error) {
	src, err := kube.NewSource(nil, kube.SourceConfig{NodeName: "reference"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return "", err
	}
	lv, err := libvirt.Open(libvirt.Config{URI: "qemu:///system"}, nil)
	if err != nil {
		return "", err
	}
	ms, err := refdoc.Metrics(slices.Concat(agent.MetricCollectors(), src.Collectors(), lv.Collectors())...)
	if err != nil {
		return "", err
	}
	var rows [][]string
	for _, m := range ms {
		rows = append(rows, []string{"`" + m.Name + "`", strings.Join(m.Labels, ", "), m.Help})
	}
	return generatedNote + "# headroom agent: metrics\n\n" +
		"Served at `GET /metrics` (Prometheus text format), named `headroom_<subsystem>_<name>_<unit>`: raw counters and gauges, rates left to PromQL. " +
		"`headroom_kube_*` only in Kubernetes mode, `headroom_libvirt_*` only on a libvirt host. Besides these, the Go runtime's (`go_*`) and the process's own (`process_*`: resident memory, open files) from client_golang's standard collectors.\n\n" +
		refdoc.Table([]string{"metric", "labels", "meaning"}, rows), nil
}

// schemaSection is one type's keys as a table.
func schemaSection(title string, v any, docs refdoc.FieldDocs) string {
	var rows [][]string
	for _, f := range refdoc.Fields(reflect.ValueOf(v), docs) {
		if f.Doc == "" {
			undocumented = append(undocumented, reflect.TypeOf(v).String()+"."+f.GoField)
		}
		rows = append(rows, []string{"`" + f.Key + "`", f.Type, f.Doc})
	}
	return "## " + title + "\n\n" + refdoc.Table([]string{"key", "type", "meaning"}, rows) + "\n"
}

func decisionsReference(docs refdoc.FieldDocs) string {
	actions := slices.Sorted(slices.Values(policy.Actions))
	var b strings.Builder
	b.WriteString(generatedNote + "# headroom agent: the decision log\n\n")
	b.WriteString("One JSON object a line on the agent's stdout, and the last 512 at `GET /v1/decisions`. ")
	b.WriteString("`action` is one of: `" + strings.Join(actions, "`, `") + "`. ")
	b.WriteString("Besides the action, its workload and its reason, a line carries the one payload its action needs.\n\n")
	b.WriteString(schemaSection("A decision line", agent.Record{}, docs))
	b.WriteString(schemaSection("`swap` (set_swap)", policy.SwapSetting{}, docs))
	b.WriteString(schemaSection("`trigger` (evict, none)", policy.Trigger{}, docs))
	b.WriteString(schemaSection("`trigger.signals[]`", policy.Signal{}, docs))
	b.WriteString(schemaSection("`outcome` (evicted)", policy.EvictionOutcome{}, docs))
	b.WriteString(schemaSection("`ksm` (set_ksm)", policy.KSMSetting{}, docs))
	b.WriteString(schemaSection("`balloon` (set_balloon)", policy.BalloonSetting{}, docs))
	b.WriteString(schemaSection("`memory_state` (memory_state)", policy.MemoryStateChange{}, docs))
	return strings.TrimRight(b.String(), "\n") + "\n"
}

func resultsReference(docs refdoc.FieldDocs) string {
	var b strings.Builder
	b.WriteString(generatedNote + "# Results: the files of a density or sim run\n\n")
	fmt.Fprintf(&b, "`headroom density` and `headroom sim` write the same files into `--out` (schema `%s`); `headroom report` reads either. ", results.SchemaVersion)
	fmt.Fprintf(&b, "`%s` holds the run and its steps; `%s` holds each step's summary columns (the step keys of the same names); ", results.RunFile, results.StepsCSV)
	fmt.Fprintf(&b, "`%s` is one node sample a line, once a second; `%s` every worker's interval records; `%s` the agent's decisions (with `--agent`).\n\n",
		results.TimelineFile, results.WorkersFile, results.AgentFile)
	b.WriteString(schemaSection("run.json", results.Run{}, docs))
	b.WriteString(schemaSection("run.json `machine.swap_devices[]`", results.SwapDevice{}, docs))
	b.WriteString(schemaSection("run.json `steps[]`", results.Step{}, docs))
	b.WriteString(schemaSection("`steps[].create_phases[]`", results.PhaseQuantiles{}, docs))
	b.WriteString(schemaSection("`steps[].per_worker[]`", results.WorkerResult{}, docs))
	b.WriteString(schemaSection("`per_worker[].vm`", results.VMResult{}, docs))
	b.WriteString(schemaSection("timeline.jsonl", results.Sample{}, docs))
	b.WriteString(schemaSection("timeline.jsonl `workers[]`", results.WorkerSample{}, docs))
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// simParametersReference is the simulator's parameter table, from the
// one declaration (internal/sim/scenario) the flags and keys come from.
func simParametersReference() string {
	return generatedNote + "# headroom sim: the parameters\n\n" +
		"Each parameter is a flag of `headroom sim` and, under the same name without the dashes, a key of a `--scenario` file; " +
		"run.json records it under its key. docs/sim.md says what each one means in the model and how to measure it on your host.\n" +
		scenario.Table()
}
