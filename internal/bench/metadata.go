package bench

import (
	"sync"
	"time"

	"github.com/catena-kv/catena/client"
)

// Metadata is the size of the causal metadata the benchmark's clients
// held during a phase: per client, the keys whose newest version it saw
// was not yet known stable (client.MetadataSize).
type Metadata struct {
	// Clients is the number of clients (one shared by every thread, or
	// one per thread).
	Clients int
	// Samples is how many times each client's size was sampled.
	Samples int
	// Mean is the mean of the samples over clients and time; Max the
	// most any client held at once (its peak, exact for a client open
	// when the phase ends; per-thread clients, closed as their thread
	// ends, count up to their last sample).
	Mean float64
	Max  int
}

// metadataSource is a binding whose clients keep causal metadata
// (CatenaDB).
type metadataSource interface {
	CausalMetadata() []client.MetadataSize
	ResetCausalMetadataPeaks()
}

// metadataEvery is how often a phase samples the metadata size.
const metadataEvery = 100 * time.Millisecond

// sampleMetadata resets the clients' peaks and samples their metadata
// size every metadataEvery until the returned function is called, which
// takes a last sample and returns the phase's figures.
func sampleMetadata(src metadataSource) func() Metadata {
	src.ResetCausalMetadataPeaks()
	var (
		mu    sync.Mutex
		m     Metadata
		sum   int
		count int
	)
	sample := func() {
		sizes := src.CausalMetadata()
		mu.Lock()
		defer mu.Unlock()
		m.Samples++
		m.Clients = max(m.Clients, len(sizes))
		for _, s := range sizes {
			sum += s.Entries
			count++
			m.Max = max(m.Max, s.Peak)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(metadataEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				sample()
			case <-stop:
				return
			}
		}
	}()
	return func() Metadata {
		close(stop)
		<-done
		sample()
		mu.Lock()
		defer mu.Unlock()
		if count > 0 {
			m.Mean = float64(sum) / float64(count)
		}
		return m
	}
}
