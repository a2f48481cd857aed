package kubetest

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The archive reads back as the image: its tag, entrypoint, platform, and
// each file at its path with its content and mode.
func TestImageArchiveReadsBack(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "conf")
	if err := os.WriteFile(conf, []byte("k: v\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := Image{Ref: "headroom.test/tool:v1", Files: map[string]string{"/usr/bin/tool": bin, "etc/tool/conf": conf},
		Entrypoint: []string{"/usr/bin/tool", "run"}}
	archive := filepath.Join(dir, "image.tar")
	if err := img.WriteArchive(archive); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(img.Ref)
	read, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := read.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, img.Entrypoint) || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Fatalf("config %+v", cf)
	}
	type file struct {
		mode    int64
		content string
	}
	got := map[string]file{}
	layers, err := read.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = file{h.Mode, string(b)}
	}
	want := map[string]file{"usr/": {0o755, ""}, "usr/bin/": {0o755, ""}, "usr/bin/tool": {0o755, "#!/bin/true\n"},
		"etc/": {0o755, ""}, "etc/tool/": {0o755, ""}, "etc/tool/conf": {0o644, "k: v\n"}}
	if len(got) != len(want) {
		t.Fatalf("files %v", got)
	}
	for p, f := range want {
		if got[p] != f {
			t.Errorf("%s: %+v, want %+v", p, got[p], f)
		}
	}
}

func TestImageRefusesABadRefOrFile(t *testing.T) {
	dir := t.TempDir()
	if err := (Image{Ref: "Not A Ref"}).WriteArchive(filepath.Join(dir, "a.tar")); err == nil {
		t.Error("a bad reference was accepted")
	}
	if err := (Image{Ref: "x/y:z", Files: map[string]string{"/bin/y": filepath.Join(dir, "missing")}}).WriteArchive(filepath.Join(dir, "b.tar")); err == nil {
		t.Error("a missing file was accepted")
	}
}
