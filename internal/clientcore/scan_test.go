package clientcore

import (
	"slices"
	"testing"

	"github.com/catena-kv/catena/internal/wire"
)

// A split keyspace is walked in split order: each volume, then the
// volumes its splits made, the latest split's last (Redis's
// reverse-binary order), so a volume's descendants follow it together.
func TestScanOrderPutsSplitsAfterTheirVolume(t *testing.T) {
	ks := wire.Keyspace{Name: "k", Prefix: "k/", FirstVolume: 10, Volumes: 2}
	ks = ks.Split([]wire.VolumeID{20, 21})         // 10 → 20, 11 → 21
	ks = ks.Split([]wire.VolumeID{30, 31, 32, 33}) // 10 → 30, 11 → 31, 20 → 32, 21 → 33
	if got, want := scanOrder(ks), []wire.VolumeID{10, 30, 20, 32, 11, 31, 21, 33}; !slices.Equal(got, want) {
		t.Fatalf("scan order %v, want %v", got, want)
	}
}

// page is a scan page for the walk tests: modulus and into are the
// split its volume's history passed (wire.ScanPage).
func page(more bool, modulus uint32, into wire.VolumeID) wire.ScanPage {
	return wire.ScanPage{Next: "x", More: more, SplitModulus: modulus, SplitInto: into}
}

// The walk across splits: a page that says its volume passed a split the
// walk's first page of it had not sends the walk to the new volume next,
// from where that page began, and the new volume is not read again from
// the order; a volume made by a split its parent passed only after the
// walk began reading the parent is not read; one made by a split the
// parent had passed already is.
func TestScanWalkAcrossASplit(t *testing.T) {
	one := wire.Keyspace{Name: wire.DefaultKeyspace, Volumes: 2}
	two := one.Split([]wire.VolumeID{2, 3})
	four := two.Split([]wire.VolumeID{4, 5, 6, 7}) // 2 → 6
	for _, tc := range []struct {
		name string
		// steps: the keyspaces the core knows when the page is
		// answered, the page, and the volume and key the walk reads
		// next (volume -1: done).
		steps []walkStep
	}{
		{"no split", []walkStep{
			{one, page(true, 0, 0), 0, "x\x00"},
			{one, page(false, 0, 0), 1, ""},
			{one, page(false, 0, 0), -1, ""},
		}},
		{"volume 0 splits while read", []walkStep{
			{one, page(true, 0, 0), 0, "x\x00"},
			{two, page(true, 4, 2), 0, "x\x00"},
			{two, page(false, 4, 2), 2, "x\x00"},
			{two, page(false, 0, 0), 1, ""},
			{two, page(false, 4, 3), 3, ""},
			{two, page(false, 0, 0), -1, ""},
		}},
		{"volume 0 split after the walk left it", []walkStep{
			{one, page(false, 0, 0), 1, ""},
			{two, page(false, 4, 3), 3, ""},
			{two, page(false, 0, 0), -1, ""},
		}},
		{"volume 2 splits after the walk read it (seed 3001 of sim -faults -splits -scans -backups -expiry -hashes)", []walkStep{
			{two, page(false, 4, 2), 2, ""},
			{four, page(false, 4, 0), 1, ""},
		}},
		{"the split known, volume 0 read before its split point (seed 3020 of sim -faults -splits -scans -backups -expiry -hashes)", []walkStep{
			{two, page(false, 2, 0), 1, ""},
			{two, page(false, 2, 0), -1, ""},
		}},
		{"the split already known when the walk began", []walkStep{
			{two, page(false, 4, 2), 2, ""},
			{two, page(false, 0, 0), 1, ""},
			{two, page(false, 4, 3), 3, ""},
			{two, page(false, 0, 0), -1, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			h.core.keyspaces = []wire.Keyspace{tc.steps[0].known}
			cur, ok := h.core.ScanStart()
			if !ok || cur.Volume != 0 {
				t.Fatalf("start: %+v, %v", cur, ok)
			}
			for i, s := range tc.steps {
				h.core.keyspaces = []wire.Keyspace{s.known}
				cur = h.core.ScanAdvance(cur, s.page)
				switch {
				case s.volume < 0 && !cur.Done:
					t.Fatalf("step %d: the walk goes on at %d %q, want it done", i, cur.Volume, cur.From)
				case s.volume >= 0 && (cur.Done || cur.Volume != wire.VolumeID(s.volume) || cur.From != s.from):
					t.Fatalf("step %d: the walk reads %d from %q (done %v), want %d from %q", i, cur.Volume, cur.From, cur.Done, s.volume, s.from)
				}
			}
		})
	}
}

type walkStep struct {
	known  wire.Keyspace
	page   wire.ScanPage
	volume int
	from   string
}
