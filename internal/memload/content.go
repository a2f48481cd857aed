package memload

import (
	"encoding/binary"
)

// writeDelta is what a write adds to the byte it touches. Only unique random
// pages may change: for every other class the byte is stored back unchanged,
// so the page is dirtied (breaking a KSM merge, invalidating a swap copy) but
// keeps its class: a duplicate stays identical to its twins, a compressible
// page stays compressible.
func writeDelta(c Content) byte {
	if c.Kind == ContentRandom {
		return 1
	}
	return 0
}

// pageFiller writes the initial content of each page of a block. Page i's
// content depends only on (content, seeds, i, page count), so tests can
// regenerate and check it.
type pageFiller struct {
	content      Content
	pageCount    uint64
	uniqueSeed   uint64 // per worker: unique pages differ between workers
	templateSeed uint64 // shared: duplicate pages are identical across workers
	dupCount     uint64
	templates    uint64
}

// sharedTemplateSeed seeds the duplicate templates. It is a constant so that
// duplicate pages of different workers (guests) are identical, as the pages
// of identical guest images are.
const sharedTemplateSeed = 0x6a09e667f3bcc909

func newPageFiller(c Content, pageCount, seed uint64) pageFiller {
	f := pageFiller{content: c, pageCount: pageCount, uniqueSeed: seed, templateSeed: sharedTemplateSeed}
	if c.Kind == ContentDup {
		f.dupCount = uint64(float64(pageCount) * c.DupFraction)
		f.templates = min(max(f.dupCount/2, 1), MaxDupTemplates)
	}
	return f
}

// dupRank reports whether page i is a duplicate and, if so, how many
// duplicates precede it. Duplicates are spread evenly over the block.
func (f *pageFiller) dupRank(i uint64) (rank uint64, isDup bool) {
	if f.dupCount == 0 {
		return 0, false
	}
	// floor(i*D/N) duplicates lie before page i; page i is one if that count
	// increases at i+1. Computed in 128 bits to avoid overflow.
	before := mulDiv(i, f.dupCount, f.pageCount)
	after := mulDiv(i+1, f.dupCount, f.pageCount)
	return before, after > before
}

// fill writes page i's content into page (len = page size). The block is
// freshly mapped (all zero), so zero bytes need no store beyond the one that
// faults the page in.
func (f *pageFiller) fill(page []byte, i uint64) {
	switch f.content.Kind {
	case ContentZero:
		page[0] = 0
	case ContentRandom:
		fillRandom(page, f.uniqueSeed, i)
	case ContentDup:
		if rank, ok := f.dupRank(i); ok {
			fillRandom(page, f.templateSeed, rank%f.templates)
		} else {
			fillRandom(page, f.uniqueSeed, i)
		}
	case ContentCompress:
		// An incompressible random prefix of size/R bytes followed by zeros
		// compresses to about size/R with lz4, lzo or zstd.
		n := int(float64(len(page))/f.content.CompressRatio + 0.5)
		n = min(max(n, 8), len(page))
		fillRandom(page[:n], f.uniqueSeed, i)
		page[len(page)-1] = 0
	}
}

// fillRandom fills b with splitmix64 output seeded by (seed, index); b's
// length need not be a multiple of 8.
func fillRandom(b []byte, seed, index uint64) {
	s := seed ^ (index+1)*0x9e3779b97f4a7c15
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, splitmix64(&s))
		b = b[8:]
	}
	if len(b) > 0 {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], splitmix64(&s))
		copy(b, tail[:])
	}
}

func splitmix64(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
