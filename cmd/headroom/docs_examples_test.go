package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The commands the README and the guides show name only flags their
// command has: a renamed or removed flag fails here, not for a reader.
// (docs/reference is generated from the commands themselves.)
func TestDocsExamplesUseRealFlags(t *testing.T) {
	files := []string{"../../README.md"}
	err := filepath.WalkDir("../../docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") && !strings.Contains(path, "/reference/") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCommand()
	var names []string
	for _, c := range root.Commands() {
		names = append(names, c.Name())
	}
	// "headroom CMD [SUB] args…" up to the end of the code span or line.
	example := regexp.MustCompile(`headroom\s+(` + strings.Join(names, "|") + `)\b([^` + "`" + `|\n]*)`)
	flagName := regexp.MustCompile(`^--([a-z][a-z0-9-]*)`)
	checked := 0
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, m := range example.FindAllStringSubmatch(line, -1) {
				args := append([]string{m[1]}, strings.Fields(m[2])...)
				if i := slices.Index(args, "--"); i >= 0 {
					args = args[:i] // vm run -- a guest command's own flags
				}
				cmd, _, err := root.Find(args)
				if err != nil {
					continue
				}
				for _, a := range args {
					name := flagName.FindStringSubmatch(a)
					if name == nil {
						continue
					}
					checked++
					if cmd.Flags().Lookup(name[1]) == nil && cmd.InheritedFlags().Lookup(name[1]) == nil && name[1] != "help" {
						t.Errorf("%s: %q: %s has no --%s", strings.TrimPrefix(path, "../../"), strings.TrimSpace(m[0]), cmd.CommandPath(), name[1])
					}
				}
			}
		}
	}
	t.Logf("%d flags in the docs' examples", checked)
	if checked < 50 {
		t.Fatalf("checked %d flags in the docs' examples: the pattern finds too few to guard anything", checked)
	}
}
