package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/measurement"
	"github.com/pingcap/go-ycsb/pkg/prop"
	_ "github.com/pingcap/go-ycsb/pkg/workload" // registers the "core" workload
	"github.com/pingcap/go-ycsb/pkg/ycsb"
)

// Workload is one of YCSB's core workloads.
type Workload struct {
	Name        string // "A"
	Description string
	// Props are the workload file's settings (YCSB's workloads/workloadX).
	Props map[string]string
	// Scans: the workload reads ranges of records (E); systems whose
	// binding cannot skip it.
	Scans bool
}

// Workloads are YCSB's core workloads A to F as YCSB itself defines them
// (brianfrankcooper/YCSB workloads/workload[a-f]): zipfian request
// distribution for A, B, C, E and F, read-latest for D. go-ycsb ships
// copies that use a uniform distribution instead; these follow YCSB. E
// reads ranges of up to 100 records from a key on, which Catena answers
// by asking every volume (client.KeysFrom) and etcd with one range read;
// Redis strings have none, so E skips the redis systems.
var Workloads = []Workload{
	{Name: "A", Description: "update heavy: 50% read, 50% update, zipfian", Props: map[string]string{
		prop.ReadProportion: "0.5", prop.UpdateProportion: "0.5", prop.RequestDistribution: "zipfian"}},
	{Name: "B", Description: "read mostly: 95% read, 5% update, zipfian", Props: map[string]string{
		prop.ReadProportion: "0.95", prop.UpdateProportion: "0.05", prop.RequestDistribution: "zipfian"}},
	{Name: "C", Description: "read only: 100% read, zipfian", Props: map[string]string{
		prop.ReadProportion: "1", prop.UpdateProportion: "0", prop.RequestDistribution: "zipfian"}},
	{Name: "D", Description: "read latest: 95% read, 5% insert, latest", Props: map[string]string{
		prop.ReadProportion: "0.95", prop.UpdateProportion: "0", prop.InsertProportion: "0.05", prop.RequestDistribution: "latest"}},
	{Name: "F", Description: "read-modify-write: 50% read, 50% read-modify-write, zipfian", Props: map[string]string{
		prop.ReadProportion: "0.5", prop.UpdateProportion: "0", prop.ReadModifyWriteProportion: "0.5", prop.RequestDistribution: "zipfian"}},
	{Name: "E", Description: "short ranges: 95% scan of 1-100 records, 5% insert, zipfian", Scans: true, Props: map[string]string{
		prop.ReadProportion: "0", prop.UpdateProportion: "0", prop.ScanProportion: "0.95", prop.InsertProportion: "0.05",
		prop.RequestDistribution: "zipfian", prop.MaxScanLength: "100", prop.ScanLengthDistribution: "uniform"}},
}

// WorkloadByName finds a workload by its letter (either case).
func WorkloadByName(name string) (Workload, bool) {
	for _, w := range Workloads {
		if strings.EqualFold(w.Name, name) {
			return w, true
		}
	}
	return Workload{}, false
}

// Sizing is what every system is measured with.
type Sizing struct {
	Records    int64 // records loaded before the workloads run
	Operations int64 // operations per workload
	Threads    int   // YCSB client threads
	// FieldCount and FieldLength shape a record (YCSB: 10 fields of 100 bytes).
	FieldCount  int
	FieldLength int
}

// DefaultSizing fits the whole comparison in well under 15 minutes on 2
// cores.
var DefaultSizing = Sizing{Records: 10_000, Operations: 50_000, Threads: 32, FieldCount: 10, FieldLength: 100}

// properties returns go-ycsb properties for running w (or, with w nil,
// loading the records).
func (s Sizing) properties(w *Workload) *properties.Properties {
	p := properties.NewProperties()
	set := func(k, v string) { p.Set(k, v) }
	set(prop.Workload, "core")
	set(prop.RecordCount, strconv.FormatInt(s.Records, 10))
	set(prop.OperationCount, strconv.FormatInt(s.Operations, 10))
	set(prop.ThreadCount, strconv.Itoa(s.Threads)) // go-ycsb defaults to 1 thread
	set(prop.FieldCount, strconv.Itoa(s.FieldCount))
	set(prop.FieldLength, strconv.Itoa(s.FieldLength))
	set(prop.ReadAllFields, "true")
	// Updates write the whole record (YCSB's writeallfields=true), so an
	// update is one write in every system: a partial update would be a
	// native field write in Redis (HSET) but a read-merge-write in Catena
	// and etcd, which store a record as one value.
	set(prop.WriteAllFields, "true")
	set(prop.InsertOrder, "hashed")
	if w != nil {
		for k, v := range w.Props {
			set(k, v)
		}
		set(prop.DoTransactions, "true")
	} else {
		set(prop.DoTransactions, "false")
	}
	return p
}

var ycsbGlobal sync.Mutex

// newCoreWorkload creates go-ycsb's core workload for p. go-ycsb keeps its
// measurements in package state and its core workload records
// read-modify-write latencies there; this harness measures on its own
// (runner.go), so the global measurement is re-initialised for every run
// and kept disabled (in "warm-up", when go-ycsb records nothing).
func newCoreWorkload(p *properties.Properties) (ycsb.Workload, error) {
	ycsbGlobal.Lock()
	defer ycsbGlobal.Unlock()
	measurement.InitMeasure(p)
	measurement.EnableWarmUp(true)
	// The core workload prints its key range to stdout; keep the
	// benchmark's own output readable.
	stdout := os.Stdout
	if devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		os.Stdout = devnull
		defer func() { os.Stdout = stdout; devnull.Close() }()
	}
	creator := ycsb.GetWorkloadCreator("core")
	if creator == nil {
		return nil, fmt.Errorf("bench: go-ycsb core workload not registered")
	}
	return creator.Create(p)
}
