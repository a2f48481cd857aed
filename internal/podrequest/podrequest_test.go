package podrequest

import "testing"

func TestMemoryBytes(t *testing.T) {
	const mi = 1 << 20
	for _, tt := range []struct {
		name       string
		containers []uint64
		inits      []InitContainer
		overhead   uint64
		want       uint64
	}{
		{"sum of containers", []uint64{1024 * mi, 512 * mi}, nil, 0, 1536 * mi},
		{"nothing requested", []uint64{0}, nil, 0, 0},
		{"a larger init container wins", []uint64{1024 * mi}, []InitContainer{{2048 * mi, false}}, 0, 2048 * mi},
		{"sidecars add to the containers", []uint64{1024 * mi}, []InitContainer{{128 * mi, true}}, 0, 1152 * mi},
		{"an init container after a sidecar runs beside it", []uint64{256 * mi}, []InitContainer{{512 * mi, true}, {1024 * mi, false}}, 0, 1536 * mi},
		{"an init container before a sidecar runs alone", []uint64{256 * mi}, []InitContainer{{1024 * mi, false}, {512 * mi, true}}, 0, 1024 * mi},
		{"pod overhead", []uint64{1024 * mi}, nil, 100 * mi, 1124 * mi},
	} {
		if got := MemoryBytes(tt.containers, tt.inits, tt.overhead); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// Fuzz: a pod's request is never below any of its containers' requests
// or the sum of its regular containers, and a sidecar adds to that sum.
func FuzzMemoryBytes(f *testing.F) {
	f.Add(uint32(100), uint32(200), uint32(300), true, uint32(0))
	f.Add(uint32(0), uint32(0), uint32(1<<20), false, uint32(64))
	f.Fuzz(func(t *testing.T, a, b, init uint32, sidecar bool, overhead uint32) {
		got := MemoryBytes([]uint64{uint64(a), uint64(b)}, []InitContainer{{uint64(init), sidecar}}, uint64(overhead))
		if got < uint64(a)+uint64(b)+uint64(overhead) || got < uint64(init)+uint64(overhead) {
			t.Fatalf("request %d for containers %d+%d, init %d (sidecar %v), overhead %d", got, a, b, init, sidecar, overhead)
		}
		if sidecar && got != uint64(a)+uint64(b)+uint64(init)+uint64(overhead) {
			t.Fatalf("sidecar %d not added to %d+%d (overhead %d): %d", init, a, b, overhead, got)
		}
	})
}
