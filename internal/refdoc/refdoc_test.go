package refdoc

import (
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type inner struct {
	// Depth is how deep.
	Depth int `json:"depth"`
}

type sample struct {
	inner `json:",inline"`
	// Name: the sample's name.
	Name string `json:"name"`
	// A and B are documented together, C with them.
	A, B float64
	C    int

	Skip  string `json:"-"`
	Child inner  `json:"child"`
	Tags  []string
	plain int
}

func TestFieldsWalksKeysWithTheirDocs(t *testing.T) {
	docs, err := ParseFiles("refdoc_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var got [][3]string
	for _, f := range Fields(reflect.ValueOf(sample{}), docs) {
		got = append(got, [3]string{f.Key, f.Type, f.Doc})
	}
	want := [][3]string{
		{"depth", "integer", "How deep."},
		{"name", "string", "The sample's name."},
		{"A", "number", "A and B are documented together, C with them."},
		{"B", "number", "A and B are documented together, C with them."},
		{"C", "integer", "A and B are documented together, C with them."},
		{"child.depth", "integer", "How deep."},
		{"Tags", "list of string", ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Fields:\n got %q\nwant %q", got, want)
	}
}

func TestMetricsReadsEveryDescriptor(t *testing.T) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: `counts "x"`}, []string{"kind", "device"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "a_bytes", Help: "bytes of a"})
	ms, err := Metrics(c, g)
	if err != nil {
		t.Fatal(err)
	}
	want := []Metric{{Name: "a_bytes", Help: "bytes of a"}, {Name: "x_total", Help: `counts "x"`, Labels: []string{"kind", "device"}}}
	if !reflect.DeepEqual(ms, want) {
		t.Errorf("Metrics = %+v, want %+v", ms, want)
	}
}

func TestTableEscapesCells(t *testing.T) {
	got := Table([]string{"k", "v"}, [][]string{{"a|b", "c\nd"}})
	want := "| k | v |\n| --- | --- |\n| a\\|b | c d |\n"
	if got != want {
		t.Errorf("Table = %q, want %q", got, want)
	}
}
