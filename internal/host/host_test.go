package host

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	p, err := ParsePSI([]byte(in))
	if err != nil || p != (PSI{SomeMicros: 12345, FullMicros: 678}) {
		t.Fatalf("ParsePSI = %+v, %v", p, err)
	}
	for _, bad := range []string{"", "some avg10=1\n", "partial total=3\n", "some total=-1\n"} {
		if _, err := ParsePSI([]byte(bad)); err == nil {
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
		if _, err := ParsePSI([]byte(s)); err == nil && !strings.Contains(s, "total=") {
			t.Fatalf("accepted %q without a total", s)
		}
	})
}

func TestReadKSMDir(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"run": "1\n", "pages_to_scan": "100\n", "sleep_millisecs": "20\n", "pages_shared": "10\n",
		"pages_sharing": "400\n", "pages_unshared": "7\n", "pages_volatile": "3\n", "full_scans": "2\n",
		"pages_scanned": "123456\n", "general_profit": "-4096\n", "advisor_mode": "none [scan-time]\n"}
	for name, v := range files {
		os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644)
	}
	k, err := ReadKSMDir(dir)
	want := KSM{Run: 1, PagesToScan: 100, SleepMillisecs: 20, AdvisorMode: "scan-time", PagesScanned: 123456, PagesShared: 10,
		PagesSharing: 400, PagesUnshared: 7, PagesVolatile: 3, FullScans: 2, GeneralProfitBytes: -4096}
	if err != nil || k != want {
		t.Fatalf("got %+v, %v\nwant %+v", k, err, want)
	}
	// An older kernel: no advisor, no profit, no scan count.
	for _, f := range []string{"pages_scanned", "general_profit", "advisor_mode"} {
		os.Remove(filepath.Join(dir, f))
	}
	if k, err := ReadKSMDir(dir); err != nil || k.AdvisorMode != "" || k.PagesSharing != 400 {
		t.Fatalf("older kernel: %+v, %v", k, err)
	}
	os.Remove(filepath.Join(dir, "pages_sharing"))
	if _, err := ReadKSMDir(dir); err == nil {
		t.Fatal("no error without pages_sharing")
	}
}

func TestSelectedOption(t *testing.T) {
	for in, want := range map[string]string{"[none] scan-time\n": "none", "none [scan-time]": "scan-time", "42\n": "42", "[]": "[]"} {
		if got := SelectedOption(in); got != want {
			t.Errorf("SelectedOption(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseStatCPUSeconds(t *testing.T) {
	line := []byte("37 (ksmd) S 2 0 0 0 -1 2097216 0 0 0 0 0 151 0 0 25 5 1 0 58 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0")
	if s, err := ParseStatCPUSeconds(line, 100); err != nil || s != 1.51 {
		t.Errorf("ksmd: %v, %v", s, err)
	}
	odd := []byte("99 (a) b (c)) R 1 1 1 0 -1 0 0 0 0 0 250 50 0 0 20 0 1 0 1 0 0")
	if s, err := ParseStatCPUSeconds(odd, 100); err != nil || s != 3 {
		t.Errorf("name with parentheses: %v, %v", s, err)
	}
	if _, err := ParseStatCPUSeconds([]byte("1 (x) S 2"), 100); err == nil {
		t.Error("short stat accepted")
	}
}

const smapsMergeable = `7f0000000000-7f0010000000 rw-p 00000000 00:00 0
Size:             262144 kB
Rss:              262144 kB
VmFlags: rd wr mr mw me ac mg
7f0010000000-7f0010100000 rw-p 00000000 00:00 0
Size:               1024 kB
VmFlags: rd wr mr mw me ac
`

func TestParseMergeable(t *testing.T) {
	if n, err := ParseMergeable([]byte(smapsMergeable)); err != nil || n != 256<<20 {
		t.Errorf("got %d, %v", n, err)
	}
}

func FuzzParseMergeable(f *testing.F) {
	f.Add([]byte(smapsMergeable))
	f.Add([]byte("Size: 4 kB\nVmFlags: mg mg\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseMergeable(b)
		if err == nil && n > 0 && !bytes.Contains(b, []byte("mg")) {
			t.Fatalf("%d mergeable bytes without an mg flag", n)
		}
	})
}

func FuzzParseStatCPUSeconds(f *testing.F) {
	f.Add([]byte("37 (ksmd) S 2 0 0 0 -1 2097216 0 0 0 0 0 151 0 0 25 5 1 0 58"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := ParseStatCPUSeconds(b, 100); err == nil && s < 0 {
			t.Fatalf("negative CPU time %v", s)
		}
	})
}

func TestParseZramMMStat(t *testing.T) {
	// orig compr mem_used mem_limit mem_used_max same_pages compacted huge huge_since
	st, err := ParseZramMMStat([]byte("  8192000  2048000  2199552        0  2199552       12        0        0        0\n"))
	want := ZramStat{OrigDataBytes: 8192000, ComprDataBytes: 2048000, MemUsedBytes: 2199552, SamePages: 12}
	if err != nil || st != want {
		t.Fatalf("ParseZramMMStat = %+v, %v; want %+v", st, err, want)
	}
	for _, bad := range []string{"", "1 2 3 4 5", "1 2 x 4 5 6", "-1 2 3 4 5 6"} {
		if _, err := ParseZramMMStat([]byte(bad)); err == nil {
			t.Errorf("ParseZramMMStat(%q) accepted", bad)
		}
	}
}

func TestCompressionRatio(t *testing.T) {
	for _, c := range []struct {
		tier SwapTier
		want float64
	}{
		{SwapTier{Kind: TierZram, StoredBytes: 4 << 20, RAMBytes: 1 << 20}, 4},
		{SwapTier{Kind: TierZram, StoredBytes: 0, RAMBytes: 20 << 10}, 0},
		{SwapTier{Kind: TierDisk, UsedBytes: 1 << 20}, 0},
	} {
		if got := c.tier.CompressionRatio(); got != c.want {
			t.Errorf("%+v: ratio %g, want %g", c.tier, got, c.want)
		}
	}
}

func FuzzParseZramMMStat(f *testing.F) {
	f.Add([]byte("8192000 2048000 2199552 0 2199552 12 0 0 0"))
	f.Add([]byte("0 0 0 0 0 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseZramMMStat(b)
		if err != nil {
			return
		}
		// Every accepted input has six numbers, the first orig_data_size
		// and the third mem_used_total.
		fields := strings.Fields(string(b))
		if len(fields) < 6 {
			t.Fatalf("accepted %q with %d fields", b, len(fields))
		}
		orig, _ := strconv.ParseUint(fields[0], 10, 64)
		used, _ := strconv.ParseUint(fields[2], 10, 64)
		if st.OrigDataBytes != orig || st.MemUsedBytes != used {
			t.Fatalf("accepted %q as %+v", b, st)
		}
	})
}

// Burning CPU shows in this process's CPU time and in the node's busy
// time, by at least as much.
func TestCPUSecondsGrowWithWork(t *testing.T) {
	nodeBefore, err := BusyCPUSeconds()
	if err != nil {
		t.Fatal(err)
	}
	before, err := ProcessCPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	var now float64
	for x := 1.0; now-before < 0.2; x = x*1.0000001 + 1e-9 {
		if time.Now().After(deadline) {
			t.Fatalf("20 s of spinning added only %.2f s of CPU time", now-before)
		}
		for range 1 << 20 {
			x = math.Sqrt(x * x)
		}
		if now, err = ProcessCPUSeconds(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	nodeAfter, err := BusyCPUSeconds()
	if err != nil {
		t.Fatal(err)
	}
	// Clock ticks: both counters move in steps of 1/USER_HZ.
	if nodeAfter-nodeBefore < now-before-0.05 {
		t.Errorf("the node was busy %.2f s while this process used %.2f s", nodeAfter-nodeBefore, now-before)
	}
	if _, err := ProcessCPUSeconds(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

// spinLocked spins on a thread of its own, after sending that thread's
// ID, until stop closes; then it holds the thread, idle, until park
// closes.
func spinLocked(tid chan<- int, stop, park <-chan struct{}, stopped *sync.WaitGroup) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid <- unix.Gettid()
	for x := 1.0; ; x = math.Sqrt(x*x + 1) {
		select {
		case <-stop:
			stopped.Done()
			<-park
			return
		default:
		}
	}
}

// More spinning threads than cores wait for one in turn: the wait shows
// in the threads' run-queue time, and the wait this process's busiest
// thread in a window is told is the wait of the one that spun in it, not
// of one that spun more before.
func TestThreadSchedstatsShowTheBusiestThreadsWait(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2*runtime.NumCPU() + 2))
	// A thread that spins first, then stays alive and idle: the most CPU
	// time of all, none of it in the window.
	earlyTID, stopEarly, parked := make(chan int, 1), make(chan struct{}), make(chan struct{})
	defer close(parked)
	var earlyStopped sync.WaitGroup
	earlyStopped.Add(1)
	go spinLocked(earlyTID, stopEarly, parked, &earlyStopped)
	<-earlyTID
	time.Sleep(300 * time.Millisecond) // the early thread's lead in CPU time, not a synchronisation
	close(stopEarly)
	earlyStopped.Wait()

	before, err := ThreadSchedstats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	spinners := 2*runtime.NumCPU() + 1
	stop, tids, free := make(chan struct{}), make(chan int, spinners), make(chan struct{})
	close(free)
	var spinning sync.WaitGroup
	for range spinners {
		spinning.Add(1)
		go spinLocked(tids, stop, free, &spinning)
	}
	time.Sleep(200 * time.Millisecond) // the contention's length, not a synchronisation
	close(stop)
	spinning.Wait()
	after, err := ThreadSchedstats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	close(tids)
	spun := map[int]bool{}
	for tid := range tids {
		spun[tid] = true
	}
	var totalWait float64
	waitOf := map[int]float64{}
	for _, a := range after {
		for _, b := range before {
			if a.TID == b.TID {
				waitOf[a.TID] = a.WaitSeconds - b.WaitSeconds
				totalWait += a.WaitSeconds - b.WaitSeconds
			}
		}
	}
	// spinners-cores threads wait at any time: about 0.2 s each.
	if totalWait < 0.1 {
		t.Errorf("%d threads spinning on %d cores for 0.2 s waited %.3f s for a core", spinners, runtime.NumCPU(), totalWait)
	}
	got := BusiestThreadWaitSeconds(before, after)
	if !slices.ContainsFunc(after, func(a ThreadSchedstat) bool { return spun[a.TID] && waitOf[a.TID] == got }) {
		t.Errorf("busiest thread's wait %.4f s: no thread that spun in the window waited that (waits %v, spun %v)", got, waitOf, spun)
	}
	if got >= totalWait {
		t.Errorf("busiest thread's wait %.4f s, all threads' %.4f s: want one thread's", got, totalWait)
	}
	if _, err := ThreadSchedstats(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

func TestParseSwaps(t *testing.T) {
	in := "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n" +
		"/dev/zram0                              partition\t1048572\t\t2048\t\t100\n" +
		"/var/tmp/headroom-swap                  file\t\t524284\t\t0\t\t-2\n"
	got, err := ParseSwaps([]byte(in))
	want := []SwapDevice{
		{Path: "/dev/zram0", Type: "partition", SizeBytes: 1048572 << 10, UsedBytes: 2048 << 10, Priority: 100},
		{Path: "/var/tmp/headroom-swap", Type: "file", SizeBytes: 524284 << 10, UsedBytes: 0, Priority: -2},
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ParseSwaps = %+v, %v; want %+v", got, err, want)
	}
	if got, err := ParseSwaps([]byte("Filename Type Size Used Priority\n")); err != nil || len(got) != 0 {
		t.Errorf("ParseSwaps(header only) = %+v, %v; want none", got, err)
	}
	for _, bad := range []string{
		"h\n/dev/sda2 partition 10 2\n",      // a field missing
		"h\n/dev/sda2 partition ten 2 -1\n",  // size not a number
		"h\n/dev/sda2 partition 10 20 -1\n",  // more used than the size
		"h\n/dev/sda2 partition 10 2 high\n", // priority not a number
	} {
		if got, err := ParseSwaps([]byte(bad)); err == nil {
			t.Errorf("ParseSwaps(%q) = %+v, accepted", bad, got)
		}
	}
}

func FuzzParseSwaps(f *testing.F) {
	f.Add([]byte("Filename Type Size Used Priority\n/dev/zram0 partition 1048572 0 100\n"))
	f.Add([]byte("h\n/x file 18014398509481983 1 -5"))
	f.Fuzz(func(t *testing.T, b []byte) {
		swaps, err := ParseSwaps(b)
		if err != nil {
			return
		}
		for _, s := range swaps {
			if s.UsedBytes > s.SizeBytes || s.SizeBytes%1024 != 0 || s.Path == "" {
				t.Fatalf("ParseSwaps(%q) gave %+v", b, s)
			}
		}
	})
}

func TestParseMeminfo(t *testing.T) {
	in := "MemTotal:       24683952 kB\nMemFree:        21317428 kB\nMemAvailable:   23813548 kB\nSwapCached:            0 kB\nSwapTotal:        524284 kB\nSwapFree:         524284 kB\nHugePages_Total:       0\n"
	got, err := ParseMeminfo([]byte(in))
	want := Memory{TotalBytes: 24683952 << 10, AvailableBytes: 23813548 << 10, SwapTotalBytes: 524284 << 10, SwapFreeBytes: 524284 << 10}
	if err != nil || got != want {
		t.Fatalf("ParseMeminfo = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{
		"MemTotal: 1 kB\nMemAvailable: 1 kB\nSwapTotal: 0 kB\n",                                 // SwapFree missing
		"MemTotal: 1 kB\nMemTotal: 1 kB\nMemAvailable: 1 kB\nSwapTotal: 0 kB\n",                 // a key twice, one missing
		"MemTotal: x kB\nMemAvailable: 1 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",                 // not a number
		"MemTotal: 1 MB\nMemAvailable: 1 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",                 // another unit
		"MemTotal: 18014398509481984 kB\nMemAvailable: 1 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n", // beyond 2^64 bytes
	} {
		if got, err := ParseMeminfo([]byte(bad)); err == nil {
			t.Errorf("ParseMeminfo(%q) = %+v, accepted", bad, got)
		}
	}
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte("MemTotal: 2 kB\nMemAvailable: 1 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeminfo(b)
		if err == nil && (m.TotalBytes%1024 != 0 || !bytes.Contains(b, []byte("SwapFree:"))) {
			t.Fatalf("ParseMeminfo(%q) = %+v", b, m)
		}
	})
}
