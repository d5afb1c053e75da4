package sim

import (
	"fmt"
	mrand "math/rand"
	"slices"

	"github.com/pingcap/go-ycsb/pkg/generator"
)

// Workload is a YCSB core workload (Cooper et al., SoCC'10) as load
// clients run it: the shares of the operations and how keys are chosen
// among LoadOptions.Objects records. internal/bench holds the workloads'
// definitions (bench.Workloads); the experiments convert them.
type Workload struct {
	// Read, Update, Insert, ReadModifyWrite and Transaction are the
	// operations' shares (they sum to 1). An insert writes a new key, after the
	// records; a read-modify-write reads a key and then writes it, and
	// counts as one completed update, its latency both operations'.
	Read, Update, Insert, ReadModifyWrite float64
	// Transaction is the share of GET-TRANSACTIONs (ChainReaction §V:
	// clientcore.StartTransaction, causal keyspaces only), each of
	// TransactionKeysMin..TransactionKeysMax distinct keys, the number
	// and the keys drawn at random (the keys by Distribution). A
	// transaction counts as one completed request.
	Transaction                            float64
	TransactionKeysMin, TransactionKeysMax int
	// Distribution chooses the keys of reads and updates: "uniform",
	// "zipfian" (YCSB's scrambled zipfian, constant 0.99) or "latest"
	// (skewed towards the most recently inserted keys).
	Distribution string
}

// The distributions of Workload.Distribution.
const (
	DistributionUniform = "uniform"
	DistributionZipfian = "zipfian"
	DistributionLatest  = "latest"
)

func (w Workload) validate(objects int) error {
	sum := w.Read + w.Update + w.Insert + w.ReadModifyWrite + w.Transaction
	if w.Read < 0 || w.Update < 0 || w.Insert < 0 || w.ReadModifyWrite < 0 || w.Transaction < 0 || sum < 0.999 || sum > 1.001 {
		return fmt.Errorf("load: workload shares %v must be non-negative and sum to 1", w)
	}
	if w.Transaction > 0 && (w.TransactionKeysMin < 1 || w.TransactionKeysMin > w.TransactionKeysMax || w.TransactionKeysMax > objects) {
		return fmt.Errorf("load: a transaction's keys %d..%d must be within 1..%d objects", w.TransactionKeysMin, w.TransactionKeysMax, objects)
	}
	switch w.Distribution {
	case DistributionUniform, DistributionZipfian, DistributionLatest:
		return nil
	}
	return fmt.Errorf("load: unknown key distribution %q (uniform, zipfian or latest)", w.Distribution)
}

// workloadOp is what a load client does next.
type workloadOp uint8

const (
	opRead workloadOp = iota
	opUpdate
	opInsert
	opReadModifyWrite
	opTransaction // its keys: clientKeys.transaction
)

// keyChooser draws a run's keys: YCSB's generators (go-ycsb), shared by
// the run's clients where YCSB shares them (the insert counter and the
// latest distribution that follows it), each client with its own random
// source so that a run is deterministic.
type keyChooser struct {
	w       Workload
	objects int64
	// inserted counts the keys inserted (from objects on), latest follows it.
	inserted *generator.Counter
	latest   *generator.SkewedLatest
}

func newKeyChooser(w Workload, objects int) *keyChooser {
	k := &keyChooser{w: w, objects: int64(objects), inserted: generator.NewCounter(int64(objects))}
	if w.Distribution == DistributionLatest {
		k.latest = generator.NewSkewedLatest(k.inserted)
	}
	return k
}

// clientKeys is one client's view of the chooser.
type clientKeys struct {
	*keyChooser
	rng     *mrand.Rand
	zipfian *generator.ScrambledZipfian
}

func (k *keyChooser) forClient(seed int64) *clientKeys {
	c := &clientKeys{keyChooser: k, rng: mrand.New(mrand.NewSource(seed))}
	if k.w.Distribution == DistributionZipfian {
		c.zipfian = generator.NewScrambledZipfian(0, k.objects-1, generator.ZipfianConstant)
	}
	return c
}

// next draws the next operation and its object.
func (c *clientKeys) next() (workloadOp, int) {
	w := c.w
	op := opRead
	switch u := c.rng.Float64(); {
	case u < w.Read:
	case u < w.Read+w.Update:
		op = opUpdate
	case u < w.Read+w.Update+w.Insert:
		op = opInsert
	case w.Transaction == 0 || u < w.Read+w.Update+w.Insert+w.ReadModifyWrite:
		op = opReadModifyWrite // what the rounding of the shares leaves, without transactions
	default:
		op = opTransaction
	}
	if op == opInsert {
		return op, int(c.inserted.Next(c.rng))
	}
	return op, c.object()
}

// transaction draws a transaction's distinct keys.
func (c *clientKeys) transaction() []int {
	n := c.w.TransactionKeysMin + c.rng.Intn(c.w.TransactionKeysMax-c.w.TransactionKeysMin+1)
	out := make([]int, 0, n)
	for len(out) < n {
		if o := c.object(); !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// object draws a read's or an update's object.
func (c *clientKeys) object() int {
	switch c.w.Distribution {
	case DistributionZipfian:
		return int(c.zipfian.Next(c.rng))
	case DistributionLatest:
		return int(c.latest.Next(c.rng))
	}
	return c.rng.Intn(int(c.objects))
}
