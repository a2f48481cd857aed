package memload

import (
	"context"
	"crypto/sha256"
	"math"
	"os"
	"testing"

	"github.com/pierrec/lz4/v4"
)

func TestParseContent(t *testing.T) {
	tests := []struct {
		in      string
		want    Content
		wantErr bool
	}{
		{"random", Content{Kind: ContentRandom}, false},
		{"zero", Content{Kind: ContentZero}, false},
		{"dup=0.8", Content{Kind: ContentDup, DupFraction: 0.8}, false},
		{"dup=0", Content{Kind: ContentDup}, false},
		{"dup=1", Content{Kind: ContentDup, DupFraction: 1}, false},
		{"compress=3", Content{Kind: ContentCompress, CompressRatio: 3}, false},
		{"compress=1", Content{Kind: ContentCompress, CompressRatio: 1}, false},
		{"dup=1.5", Content{}, true},
		{"dup=-0.1", Content{}, true},
		{"dup=NaN", Content{}, true},
		{"dup", Content{}, true},
		{"compress=0.5", Content{}, true},
		{"compress=65", Content{}, true},
		{"compress=", Content{}, true},
		{"zero=1", Content{}, true},
		{"ones", Content{}, true},
	}
	for _, tt := range tests {
		got, err := ParseContent(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseContent(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil {
			if back, err := ParseContent(got.String()); err != nil || back != got {
				t.Errorf("%q does not round-trip: %q gives %+v, %v", tt.in, got.String(), back, err)
			}
		}
	}
}

func FuzzParseContent(f *testing.F) {
	for _, s := range []string{"random", "zero", "dup=0.8", "compress=3", "dup=", "compress=1e309", "dup=0x1p-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseContent(s)
		if err != nil {
			return
		}
		if c.DupFraction < 0 || c.DupFraction > 1 || (c.Kind == ContentCompress && (c.CompressRatio < 1 || c.CompressRatio > 64)) {
			t.Fatalf("ParseContent(%q) accepted out-of-range %+v", s, c)
		}
		if back, err := ParseContent(c.String()); err != nil || back != c {
			t.Fatalf("%+v does not round-trip through %q: %+v, %v", c, c.String(), back, err)
		}
	})
}

// populated maps and fills a block of the given pages, closed at test end.
func populated(t *testing.T, pages uint64, c Content, seed uint64) *Block {
	t.Helper()
	b, err := Map(pages*uint64(pageBytesForTest()), false, HugePagesNever)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	b.Populate(c, seed, func() bool { return false })
	return b
}

func pageBytesForTest() int { return os.Getpagesize() }

// A stop asked for during populate ends it within populateStopCheckPages.
func TestPopulateStopsPromptly(t *testing.T) {
	b, err := Map(8192*uint64(pageBytesForTest()), false, HugePagesNever)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	polls := 0
	st := b.Populate(Content{Kind: ContentRandom}, 1, func() bool { polls++; return polls > 1 })
	if st.Pages != populateStopCheckPages {
		t.Fatalf("stopped after %d pages, want %d (the stop asked for at the second poll)", st.Pages, populateStopCheckPages)
	}
}

// duplicateFraction counts pages whose exact content occurs more than once.
func duplicateFraction(b *Block) float64 {
	counts := map[[32]byte]int{}
	for i := range b.Pages() {
		counts[sha256.Sum256(b.Page(i))]++
	}
	dups := 0
	for _, n := range counts {
		if n > 1 {
			dups += n
		}
	}
	return float64(dups) / float64(b.Pages())
}

func TestDupContentHasRequestedDuplicateFraction(t *testing.T) {
	for _, f := range []float64{0, 0.1, 0.5, 0.8, 1} {
		b := populated(t, 4096, Content{Kind: ContentDup, DupFraction: f}, 7)
		if got := duplicateFraction(b); math.Abs(got-f) > 1.0/4096 {
			t.Errorf("dup=%g: %.4f of pages are duplicates", f, got)
		}
	}
}

func TestRandomAndCompressPagesAreUnique(t *testing.T) {
	for _, c := range []Content{{Kind: ContentRandom}, {Kind: ContentCompress, CompressRatio: 4}} {
		if got := duplicateFraction(populated(t, 2048, c, 3)); got != 0 {
			t.Errorf("%s: %.4f of pages are duplicates, want none", c, got)
		}
	}
	if got := duplicateFraction(populated(t, 64, Content{Kind: ContentZero}, 3)); got != 1 {
		t.Errorf("zero: %.4f of pages are duplicates, want all", got)
	}
}

// Duplicates are identical across workers (different seeds), unique pages not:
// that is what lets KSM merge identical guests.
func TestDupPagesAreSharedAcrossWorkers(t *testing.T) {
	c := Content{Kind: ContentDup, DupFraction: 0.5}
	a, b := populated(t, 512, c, 1), populated(t, 512, c, 2)
	f := newPageFiller(c, 512, 1)
	same, dups := 0, 0
	for i := range uint64(512) {
		_, isDup := f.dupRank(i)
		eq := string(a.Page(i)) == string(b.Page(i))
		if isDup {
			dups++
			if !eq {
				t.Fatalf("duplicate page %d differs between workers", i)
			}
		} else if eq {
			same++
		}
	}
	if dups != 256 || same != 0 {
		t.Errorf("%d duplicate pages (want 256), %d unique pages equal across workers (want 0)", dups, same)
	}
}

func lz4Ratio(t *testing.T, b *Block) float64 {
	t.Helper()
	var c lz4.Compressor
	dst := make([]byte, lz4.CompressBlockBound(int(b.PageBytes())))
	var in, out int
	for i := range b.Pages() {
		n, err := c.CompressBlock(b.Page(i), dst)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 { // incompressible: stored as is
			n = int(b.PageBytes())
		}
		in += int(b.PageBytes())
		out += n
	}
	return float64(in) / float64(out)
}

func TestCompressContentHasRequestedRatio(t *testing.T) {
	for _, r := range []float64{1, 1.5, 2, 3, 4, 8} {
		got := lz4Ratio(t, populated(t, 1024, Content{Kind: ContentCompress, CompressRatio: r}, 5))
		if math.Abs(got-r)/r > 0.1 {
			t.Errorf("compress=%g: lz4 ratio %.2f, want within 10%%", r, got)
		}
	}
	if got := lz4Ratio(t, populated(t, 256, Content{Kind: ContentRandom}, 5)); got > 1.01 {
		t.Errorf("random pages compress %.2f:1 with lz4, want incompressible", got)
	}
}

// A full run of writes must not change the content class.
func TestWritesKeepContentClass(t *testing.T) {
	const pages = 2048
	for _, scan := range []Scan{ScanSeq, ScanRandom} {
		dup := populated(t, pages, Content{Kind: ContentDup, DupFraction: 0.8}, 9)
		comp := populated(t, pages, Content{Kind: ContentCompress, CompressRatio: 3}, 9)
		uniq := populated(t, pages, Content{Kind: ContentRandom}, 9)
		for _, tc := range []struct {
			b *Block
			c Content
		}{{dup, Content{Kind: ContentDup, DupFraction: 0.8}}, {comp, Content{Kind: ContentCompress, CompressRatio: 3}}, {uniq, Content{Kind: ContentRandom}}} {
			p := testParams(tc.b, scan)
			p.Content, p.Iterations = tc.c, 3
			Run(context.Background(), tc.b, p, PopulateStats{}, nil)
		}
		if got := duplicateFraction(dup); math.Abs(got-0.8) > 1.0/pages {
			t.Errorf("%s: after writes %.4f of dup=0.8 pages are duplicates", scan, got)
		}
		if got := lz4Ratio(t, comp); math.Abs(got-3)/3 > 0.1 {
			t.Errorf("%s: after writes compress=3 pages compress %.2f:1", scan, got)
		}
		if got := duplicateFraction(uniq); got != 0 {
			t.Errorf("%s: after writes %.4f of random pages are duplicates", scan, got)
		}
	}
}

// A block's checksum is the same for the same content and seed, and any
// page written changes it.
func TestBlockChecksum(t *testing.T) {
	sums := make([]string, 2)
	for i := range sums {
		b, err := Map(1<<20, false, HugePagesNever)
		if err != nil {
			t.Fatal(err)
		}
		b.Populate(Content{}, 7, func() bool { return false })
		sums[i] = b.Checksum()
		if i == 1 {
			b.Page(100)[5]++
			if b.Checksum() == sums[0] {
				t.Error("a written page left the checksum as it was")
			}
		}
		b.Close()
	}
	if sums[0] != sums[1] {
		t.Errorf("same content and seed, checksums %s and %s", sums[0], sums[1])
	}
}
