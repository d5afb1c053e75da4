package bench

import (
	"sync"
	"testing"

	"github.com/catena-kv/catena/client"
)

// fakeMetadata is a metadataSource whose sizes the test sets.
type fakeMetadata struct {
	mu     sync.Mutex
	sizes  []client.MetadataSize
	resets int
}

func (f *fakeMetadata) CausalMetadata() []client.MetadataSize {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]client.MetadataSize(nil), f.sizes...)
}

func (f *fakeMetadata) ResetCausalMetadataPeaks() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resets++
}

// The figures are the mean of the entries over clients and samples and
// the largest peak; the peaks are reset when sampling starts.
func TestSampleMetadata(t *testing.T) {
	f := &fakeMetadata{sizes: []client.MetadataSize{{Entries: 1, Peak: 4}, {Entries: 3, Peak: 9}}}
	m := sampleMetadata(f)()
	if f.resets != 1 {
		t.Fatalf("peaks reset %d times, want once", f.resets)
	}
	if m.Clients != 2 || m.Samples < 1 || m.Mean != 2 || m.Max != 9 {
		t.Fatalf("metadata %+v; want 2 clients, mean 2, max 9", m)
	}
	empty := sampleMetadata(&fakeMetadata{})()
	if empty.Clients != 0 || empty.Mean != 0 || empty.Max != 0 {
		t.Fatalf("no clients: %+v", empty)
	}
}
