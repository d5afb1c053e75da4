package experiment

import (
	"fmt"
	"sync"
	"time"

	"github.com/catena-kv/catena/internal/clientcore"
	"github.com/catena-kv/catena/internal/sim"
	"github.com/catena-kv/catena/internal/wire"
)

// ChainReaction's single-site experiments (Almeida, Leitão, Rodrigues,
// §VII-A Figure 2(b) and §VII-D Figure 5): one object on one chain of
// R = 6 servers with k = 3, run on Catena's causal mode (ADR 10) in the
// simulator (sim.RunLoad), against Catena's strong chains and CRAQ reads.

// The paper's chain: R = 6 replicas, writes answered after k = 3.
const (
	crReplicas = 6
	crK        = 3
)

// CRCost is what a server spends on each request or update it handles:
// a read (or a refusal, or a dependency wait) at the member that gets
// it, a client update at the head, and each update applied from a
// Forward at every other member. The paper gives no service times; it
// says strong chains' throughput is "always the same" whatever the
// write/read mix, "bounded by a bottleneck on the tail node", which is
// what equal read and write costs give (the tail handles every read and
// applies every write). 100 µs is 10,000 requests per second per server.
const CRCost = 100 * wire.Microsecond

// CRCosts are the modelled service times: CRCost for every read, update
// and applied update; acknowledgements, heartbeats and configurations
// cost nothing (as in fig4).
var CRCosts = sim.Costs{Query: CRCost, Update: CRCost, Forward: CRCost}

// CRLatency is one message's way between any two nodes: a 1 Gbit LAN.
const CRLatency = 100 * wire.Microsecond

// CRVariant names one protocol fig2b compares.
type CRVariant string

// The variants; chainreaction-fig5 runs CRCausal and CRCausalNoWait.
const (
	// CRCausal is Catena's causal+ mode, R = 6, k = 3.
	CRCausal CRVariant = "causal"
	// CRChain3 and CRChain6 are strong chains of 3 and 6 (the paper's
	// FAWN-KV 3 and 6): reads at the tail.
	CRChain3 CRVariant = "chain3"
	CRChain6 CRVariant = "chain6"
	// CRCRAQ6 is a strong chain of 6 with CRAQ's clean reads at any
	// member (ADR 7).
	CRCRAQ6 CRVariant = "craq6"
	// CRCausalNoWait is CRCausal without the dependency wait before a
	// write (clientcore.Options.SkipDependencyWait), an ablation: with
	// one object a write's only dependency is the client's previous
	// version of that object, which the chain orders before the write
	// anyway, so leaving the wait out keeps causal+ on this workload and
	// shows what the wait costs. Not a mode Catena offers.
	CRCausalNoWait CRVariant = "causal-nowait"
)

// CRFig2bVariants are the variants of chainreaction-fig2b, in the order
// they are reported.
var CRFig2bVariants = []CRVariant{CRCausal, CRChain3, CRChain6, CRCRAQ6}

// crServers names n servers s1..sn.
func crServers(from, n int) []wire.NodeID {
	out := make([]wire.NodeID, n)
	for i := range out {
		out[i] = wire.NodeID(fmt.Sprintf("s%d", from+i))
	}
	return out
}

// crLoad returns the load options of variant v on one object: the chain,
// the protocol, the costs and Catena's client timeouts; the caller sets
// the clients, mix, durations and failures.
func crLoad(v CRVariant, seed uint64) (sim.LoadOptions, error) {
	o := sim.LoadOptions{
		Seed: seed, Objects: 1, Latency: CRLatency, Costs: CRCosts,
		// Catena's servers handle their peers' messages before clients'
		// requests (docs/adr/0025).
		PeersFirst: true,
		// Catena's client resends an attempt unanswered for this long.
		AttemptTimeout: clientcore.DefaultAttemptTimeout,
	}
	n := crReplicas
	switch v {
	case CRCausal, CRCausalNoWait:
		o.Protocol, o.K = sim.ProtocolCausal, crK
		o.SkipDependencyWait = v == CRCausalNoWait
	case CRChain3:
		o.Protocol, n = sim.ProtocolChain, 3
	case CRChain6:
		o.Protocol = sim.ProtocolChain
	case CRCRAQ6:
		o.Protocol = sim.ProtocolCRAQ
	default:
		return o, fmt.Errorf("chainreaction: unknown variant %q", v)
	}
	o.Chains = map[wire.VolumeID][]wire.NodeID{0: crServers(1, n)}
	return o, nil
}

// crProgress returns a function that each run calls as its simulated
// time passes: it prints a line when none was printed for
// o.ProgressEvery, so a long run is not silent between parallel's lines.
func crProgress(o Options, name string) func(run string, now, of wire.Time) {
	var mu sync.Mutex
	last := time.Now()
	return func(run string, now, of wire.Time) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) >= o.ProgressEvery {
			last = time.Now()
			fmt.Fprintf(o.Progress, "%s: %s at %s of %s simulated\n", name, run, clock(now), clock(of))
		}
	}
}
