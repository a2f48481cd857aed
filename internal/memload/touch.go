package memload

import (
	"math/bits"
	"unsafe"
)

// toucher performs the measured accesses. Its loops are the hot path: one
// per (scan, write mix) so that no per-touch branch or call remains but the
// access itself, and pointer arithmetic instead of slice indexing so that no
// bounds check is paid (offsets are always < slots*stride <= block size).
type toucher struct {
	base   unsafe.Pointer
	slots  uint64 // number of touchable positions: block bytes / stride
	stride uint64
	pos    uint64 // next sequential slot
	rng    uint64 // wyrand state for random scans
	// writeStep is the write fraction in 1/2^32 units; a touch writes when
	// the accumulator overflows, so exactly that fraction of touches write,
	// evenly spread, without a random draw.
	writeStep uint64
	writeAcc  uint64
	delta     byte
	sink      byte // keeps reads observable
}

const writeOne = 1 << 32

func newToucher(b *Block, strideBytes uint64, writeFraction float64, c Content, seed uint64) *toucher {
	return &toucher{
		base:      unsafe.Pointer(unsafe.SliceData(b.mem)),
		slots:     b.Bytes() / strideBytes,
		stride:    strideBytes,
		rng:       seed,
		writeStep: uint64(writeFraction * writeOne),
		delta:     writeDelta(c),
	}
}

// wyrand is a fast 64-bit generator (Wang Yi's wyhash PRNG); the C reference
// in bench/ uses the same one so both do the same work.
// It takes and returns the state by value so the loops keep it in a register.
func wyrand(s uint64) (next, out uint64) {
	s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(s, s^0xe7037ed1a0b428db)
	return s, hi ^ lo
}

// touch performs n accesses with the given scan.
func (t *toucher) touch(scan Scan, n uint64) {
	switch {
	case scan == ScanSeq && t.writeStep >= writeOne:
		t.seqWrite(n)
	case scan == ScanSeq && t.writeStep == 0:
		t.seqRead(n)
	case scan == ScanSeq:
		t.seqMixed(n)
	case t.writeStep >= writeOne:
		t.randomWrite(n)
	case t.writeStep == 0:
		t.randomRead(n)
	default:
		t.randomMixed(n)
	}
}

func (t *toucher) seqWrite(n uint64) {
	base, pos, slots, stride, delta := t.base, t.pos, t.slots, t.stride, t.delta
	for ; n > 0; n-- {
		*(*byte)(unsafe.Add(base, pos*stride)) += delta
		pos++
		if pos == slots {
			pos = 0
		}
	}
	t.pos = pos
}

func (t *toucher) seqRead(n uint64) {
	base, pos, slots, stride, sink := t.base, t.pos, t.slots, t.stride, t.sink
	for ; n > 0; n-- {
		sink ^= *(*byte)(unsafe.Add(base, pos*stride))
		pos++
		if pos == slots {
			pos = 0
		}
	}
	t.pos, t.sink = pos, sink
}

func (t *toucher) seqMixed(n uint64) {
	base, pos, slots, stride, delta, sink := t.base, t.pos, t.slots, t.stride, t.delta, t.sink
	acc, step := t.writeAcc, t.writeStep
	for ; n > 0; n-- {
		p := (*byte)(unsafe.Add(base, pos*stride))
		acc += step
		if acc >= writeOne {
			acc -= writeOne
			*p += delta
		} else {
			sink ^= *p
		}
		pos++
		if pos == slots {
			pos = 0
		}
	}
	t.pos, t.sink, t.writeAcc = pos, sink, acc
}

func (t *toucher) randomWrite(n uint64) {
	t.rng = randomWriteLoop(t.base, t.rng, t.slots, t.stride, t.delta, n)
}

// randomWriteLoop is a free function, not a method, so no receiver pointer
// stays live across the loop competing with MULQ's fixed registers; it is
// unrolled twice (four times spills registers) because the generator, not memory, bounds this loop
// on a resident block.
func randomWriteLoop(base unsafe.Pointer, rng, slots, stride uint64, delta byte, n uint64) uint64 {
	var r uint64
	for ; n >= 2; n -= 2 {
		rng, r = wyrand(rng)
		s0, _ := bits.Mul64(r, slots)
		rng, r = wyrand(rng)
		s1, _ := bits.Mul64(r, slots)
		*(*byte)(unsafe.Add(base, s0*stride)) += delta
		*(*byte)(unsafe.Add(base, s1*stride)) += delta
	}
	for ; n > 0; n-- {
		rng, r = wyrand(rng)
		slot, _ := bits.Mul64(r, slots) // uniform in [0, slots)
		*(*byte)(unsafe.Add(base, slot*stride)) += delta
	}
	return rng
}

func (t *toucher) randomRead(n uint64) {
	base, rng, slots, stride, sink := t.base, t.rng, t.slots, t.stride, t.sink
	for ; n > 0; n-- {
		var r uint64
		rng, r = wyrand(rng)
		slot, _ := bits.Mul64(r, slots)
		sink ^= *(*byte)(unsafe.Add(base, slot*stride))
	}
	t.rng, t.sink = rng, sink
}

func (t *toucher) randomMixed(n uint64) {
	base, rng, slots, stride, delta, sink := t.base, t.rng, t.slots, t.stride, t.delta, t.sink
	acc, step := t.writeAcc, t.writeStep
	for ; n > 0; n-- {
		var r uint64
		rng, r = wyrand(rng)
		slot, _ := bits.Mul64(r, slots)
		p := (*byte)(unsafe.Add(base, slot*stride))
		acc += step
		if acc >= writeOne {
			acc -= writeOne
			*p += delta
		} else {
			sink ^= *p
		}
	}
	t.rng, t.sink, t.writeAcc = rng, sink, acc
}
