package workloadmeta

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Metadata
		wantErr bool
	}{
		{`{"name":"vm-a","priority":100,"memoryRequest":"4Gi","protected":true}`, Metadata{Name: "vm-a", Priority: 100, MemoryRequestBytes: 4 << 30, Protected: true}, false},
		{`{"memoryRequest":1073741824}`, Metadata{MemoryRequestBytes: 1 << 30}, false},
		{`{"priority":-5}`, Metadata{Priority: -5}, false},
		{`{}`, Metadata{}, false},
		{`{"memoryRequest":"lots"}`, Metadata{}, true},
		{`{"memoryRequest":-1}`, Metadata{}, true},
		{`{"priority":"high"}`, Metadata{}, true},
		{`not json`, Metadata{}, true},
		{`{"name":"vm1","qmp":"/run/vm1/qmp.sock"}`, Metadata{Name: "vm1", QMPSocket: "/run/vm1/qmp.sock"}, false},
		{`{"qmp":"relative.sock"}`, Metadata{}, true},
	}
	for _, tt := range tests {
		got, err := Parse([]byte(tt.in))
		if (err != nil) != tt.wantErr || (err == nil && got != tt.want) {
			t.Errorf("Parse(%s) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func FuzzParseMetadata(f *testing.F) {
	for _, s := range []string{`{"name":"a","priority":1,"memoryRequest":"1Gi"}`, `{"memoryRequest":5}`, `{"memoryRequest":null}`, `[]`, `{"protected":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err == nil && !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q as %+v", b, m)
		}
	})
}

// A missing file is the cgroup's name alone; a file without a name takes
// the cgroup's; a bad file is an error naming it.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	if md, err := Read(dir, "vm-x"); err != nil || md != (Metadata{Name: "vm-x"}) {
		t.Errorf("missing file: %+v, %v; want the name alone", md, err)
	}
	os.WriteFile(filepath.Join(dir, "vm-y.json"), []byte(`{"priority":3}`), 0o644)
	if md, err := Read(dir, "vm-y"); err != nil || md != (Metadata{Name: "vm-y", Priority: 3}) {
		t.Errorf("a file without a name: %+v, %v", md, err)
	}
	os.WriteFile(filepath.Join(dir, "vm-z.json"), []byte(`{"priority":"high"}`), 0o644)
	if _, err := Read(dir, "vm-z"); err == nil || !strings.Contains(err.Error(), "vm-z.json") {
		t.Errorf("a bad file: %v, want an error naming vm-z.json", err)
	}
}

// A file that is truncated, too large, or a symlink leading out of the
// directory gives the defaults and an error; a symlink inside the
// directory is followed.
func TestReadRefusesWhatLeavesItsDirectory(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.json")
	os.WriteFile(secret, []byte(`{"priority":99,"protected":true}`), 0o644)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "real.json"), []byte(`{"priority":7}`), 0o644)
	os.Symlink(secret, filepath.Join(dir, "escape.json"))
	os.Symlink("../"+filepath.Base(outside)+"/secret.json", filepath.Join(dir, "relative.json"))
	os.Symlink("real.json", filepath.Join(dir, "inside.json"))
	os.WriteFile(filepath.Join(dir, "cut.json"), []byte(`{"priority":7,"memoryReq`), 0o644)
	os.WriteFile(filepath.Join(dir, "huge.json"), []byte(`{"name":"`+strings.Repeat("x", MaxFileBytes)+`"}`), 0o644)
	for _, c := range []struct {
		name    string
		want    Metadata
		wantErr bool
	}{
		{"escape", Metadata{Name: "escape"}, true},
		{"relative", Metadata{Name: "relative"}, true},
		{"inside", Metadata{Name: "inside", Priority: 7}, false},
		{"cut", Metadata{Name: "cut"}, true},
		{"huge", Metadata{Name: "huge"}, true},
		{"../" + filepath.Base(outside) + "/secret", Metadata{Name: "../" + filepath.Base(outside) + "/secret"}, true},
	} {
		md, err := Read(dir, c.name)
		if md != c.want || (err != nil) != c.wantErr {
			t.Errorf("%s: %+v, %v; want %+v, error %v", c.name, md, err, c.want, c.wantErr)
		}
	}
}
