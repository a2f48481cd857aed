package memload

import (
	"fmt"
	"hash/crc64"
	"math/bits"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// HugePages selects transparent huge page behaviour for the block.
type HugePages string

const (
	// HugePagesNever marks the block MADV_NOHUGEPAGE: every touch is a 4 KiB
	// page, so paging behaves as it does for a guest's memory.
	HugePagesNever HugePages = "never"
	// HugePagesMadvise marks the block MADV_HUGEPAGE.
	HugePagesMadvise HugePages = "madvise"
)

// Block is an anonymous memory mapping the workload touches. It lives outside
// the Go heap, so the garbage collector neither scans nor moves it.
type Block struct {
	mem       []byte
	pageBytes uint64
}

// PopulateStats describes how the block was filled before the measured phase.
type PopulateStats struct {
	Pages       uint64        `json:"pages"`
	Duration    time.Duration `json:"-"`
	Seconds     float64       `json:"seconds"`
	PagesPerSec float64       `json:"pages_per_sec"`
	MajorFaults uint64        `json:"major_faults"`
	MinorFaults uint64        `json:"minor_faults"`
	// Checksum is the block's CRC-64 once populated (Params.Checksum).
	Checksum string `json:"checksum,omitempty"`
}

// Map maps sizeBytes (rounded up to whole pages) of anonymous memory and
// applies the KSM and THP advice. Nothing is populated yet.
func Map(sizeBytes uint64, mergeable bool, huge HugePages) (*Block, error) {
	pageBytes := uint64(os.Getpagesize())
	if sizeBytes == 0 {
		return nil, fmt.Errorf("map block: size must be positive")
	}
	size := (sizeBytes + pageBytes - 1) / pageBytes * pageBytes
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes: %w", size, err)
	}
	b := &Block{mem: mem, pageBytes: pageBytes}
	advice := unix.MADV_NOHUGEPAGE
	if huge == HugePagesMadvise {
		advice = unix.MADV_HUGEPAGE
	}
	if err := unix.Madvise(mem, advice); err != nil {
		b.Close()
		return nil, fmt.Errorf("madvise hugepages=%s: %w", huge, err)
	}
	if mergeable {
		if err := unix.Madvise(mem, unix.MADV_MERGEABLE); err != nil {
			b.Close()
			return nil, fmt.Errorf("madvise MADV_MERGEABLE (is KSM built into this kernel?): %w", err)
		}
	}
	return b, nil
}

// Bytes is the mapped length.
func (b *Block) Bytes() uint64 { return uint64(len(b.mem)) }

// Pages is the number of pages in the block.
func (b *Block) Pages() uint64 { return b.Bytes() / b.pageBytes }

// PageBytes is the system page size.
func (b *Block) PageBytes() uint64 { return b.pageBytes }

// Page returns page i of the block.
func (b *Block) Page(i uint64) []byte {
	off := i * b.pageBytes
	return b.mem[off : off+b.pageBytes : off+b.pageBytes]
}

// populateStopCheckPages is how often Populate polls stop: every MiB. A
// populate that pages (a node over its RAM, a slow guest) may fill only a
// few MiB a second, and an evicted workload must leave within its grace
// period (a 2 s grace missed at 16 MiB between polls in a TCG guest).
const populateStopCheckPages = 256

// Populate writes every page's initial content (faulting it in) and returns
// how long that took. stop is polled between pages so a signal during a long
// populate ends it early; Populate then returns the pages done so far.
func (b *Block) Populate(c Content, seed uint64, stop func() bool) PopulateStats {
	f := newPageFiller(c, b.Pages(), seed)
	before := readUsage()
	start := time.Now()
	var i uint64
	for ; i < b.Pages(); i++ {
		if i%populateStopCheckPages == 0 && stop() {
			break
		}
		f.fill(b.Page(i), i)
	}
	d := time.Since(start)
	after := readUsage()
	return PopulateStats{
		Pages:       i,
		Duration:    d,
		Seconds:     d.Seconds(),
		PagesPerSec: perSecond(i, d),
		MajorFaults: after.major - before.major,
		MinorFaults: after.minor - before.minor,
	}
}

// Checksum is the CRC-64 (ECMA) of the whole block, in hex: the same
// after a save and restore of the process or its VM when nothing wrote to
// the block. It reads every page (faulting in any that were swapped out).
func (b *Block) Checksum() string {
	return fmt.Sprintf("%016x", crc64.Checksum(b.mem, crcTable))
}

var crcTable = crc64.MakeTable(crc64.ECMA)

// Close unmaps the block.
func (b *Block) Close() error {
	if b.mem == nil {
		return nil
	}
	err := unix.Munmap(b.mem)
	b.mem = nil
	return err
}

// mulDiv returns floor(a*b/c) without overflow; the quotient must fit in 64 bits.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

func perSecond(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
