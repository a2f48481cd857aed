package host

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseVMStat(t *testing.T) {
	in := "nr_free_pages 5000\npswpin 12\npswpout 34\npgmajfault 56\nworkingset_refault_anon 3\n"
	v, err := ParseVMStat([]byte(in))
	if err != nil || v != (VMStat{PswpIn: 12, PswpOut: 34, PgMajFault: 56}) {
		t.Fatalf("ParseVMStat = %+v, %v", v, err)
	}
	for _, bad := range []string{"", "pswpin 1\npswpout 2\n", "pswpin x\npswpout 2\npgmajfault 3\n"} {
		if _, err := ParseVMStat([]byte(bad)); err == nil {
			t.Errorf("ParseVMStat(%q) accepted", bad)
		}
	}
}

func TestParsePSI(t *testing.T) {
	in := "some avg10=1.00 avg60=0.50 avg300=0.10 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=678\n"
	p, err := ParsePSI(strings.NewReader(in))
	if err != nil || p != (PSI{SomeMicros: 12345, FullMicros: 678}) {
		t.Fatalf("ParsePSI = %+v, %v", p, err)
	}
	for _, bad := range []string{"", "some avg10=1\n", "partial total=3\n", "some total=-1\n"} {
		if _, err := ParsePSI(strings.NewReader(bad)); err == nil {
			t.Errorf("ParsePSI(%q) accepted", bad)
		}
	}
}

// The real files parse on this machine.
func TestReadHostFiles(t *testing.T) {
	if _, err := ReadVMStat(); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadMemory(); err != nil || m.TotalBytes == 0 {
		t.Fatalf("ReadMemory = %+v, %v", m, err)
	}
	if _, err := ReadMemoryPSI(); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSwaps(); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseVMStat(f *testing.F) {
	f.Add([]byte("pswpin 1\npswpout 2\npgmajfault 3\n"))
	f.Add([]byte("pswpin 18446744073709551615\npswpout 0\npgmajfault 0"))
	f.Add([]byte("pswpin\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseVMStat(b)
		if err == nil && !bytes.Contains(b, []byte("pswpin")) {
			t.Fatalf("accepted input without pswpin: %+v", v)
		}
	})
}

func FuzzParsePSI(f *testing.F) {
	f.Add("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	f.Add("some total=5")
	f.Add("full total=\n")
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := ParsePSI(strings.NewReader(s)); err == nil && !strings.Contains(s, "total=") {
			t.Fatalf("accepted %q without a total", s)
		}
	})
}
