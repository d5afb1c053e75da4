package bench

import (
	"bytes"
	"context"
	"maps"
	"sync"
	"testing"
)

// memDB is a YCSB binding on a map, to test the harness without a server.
type memDB struct {
	mu      sync.Mutex
	records map[string]map[string][]byte
	calls   map[string]int
}

func newMemDB() *memDB {
	return &memDB{records: map[string]map[string][]byte{}, calls: map[string]int{}}
}

func (m *memDB) Close() error                                             { return nil }
func (m *memDB) InitThread(ctx context.Context, _, _ int) context.Context { return ctx }
func (m *memDB) CleanupThread(context.Context)                            {}

func (m *memDB) Read(_ context.Context, table, key string, fields []string) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["read"]++
	r, ok := m.records[recordKey(table, key)]
	if !ok {
		return nil, errNotFound
	}
	return maps.Clone(r), nil
}

func (m *memDB) Scan(context.Context, string, string, int, []string) ([]map[string][]byte, error) {
	return nil, errScan
}

func (m *memDB) Update(_ context.Context, table, key string, values map[string][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["update"]++
	r, ok := m.records[recordKey(table, key)]
	if !ok {
		return errNotFound
	}
	for f, v := range values {
		r[f] = bytes.Clone(v)
	}
	return nil
}

func (m *memDB) Insert(_ context.Context, table, key string, values map[string][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["insert"]++
	r := map[string][]byte{}
	for f, v := range values {
		r[f] = bytes.Clone(v)
	}
	m.records[recordKey(table, key)] = r
	return nil
}

func (m *memDB) Delete(_ context.Context, table, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.records, recordKey(table, key))
	return nil
}

// TestPhases runs the load and every workload through go-ycsb's core
// workload against a map: operation counts, operation kinds and the
// records' shape come out as YCSB defines them.
func TestPhases(t *testing.T) {
	s := Sizing{Records: 500, Operations: 400, Threads: 8, FieldCount: 10, FieldLength: 100}
	db := newMemDB()
	run := func(w *Workload) PhaseResult {
		t.Helper()
		wl, err := newCoreWorkload(s.properties(w))
		if err != nil {
			t.Fatal(err)
		}
		defer wl.Close()
		total := s.Operations
		if w == nil {
			total = s.Records
		}
		res, err := phase{workload: wl, db: db, threads: s.Threads, total: total, load: w == nil}.run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !res.Complete || res.Operations != total || res.Ops[OpAll].Count != total {
			t.Fatalf("%v: %d operations (complete %v, counted %d), want %d", w, res.Operations, res.Complete, res.Ops[OpAll].Count, total)
		}
		return res
	}
	load := run(nil)
	if len(db.records) != int(s.Records) || load.Ops[OpInsert].Count != s.Records {
		t.Fatalf("load: %d records, %d inserts; want %d", len(db.records), load.Ops[OpInsert].Count, s.Records)
	}
	for _, r := range db.records {
		if len(r) != s.FieldCount || len(r["field0"]) != s.FieldLength {
			t.Fatalf("record has %d fields, field0 %d bytes", len(r), len(r["field0"]))
		}
		break
	}
	kinds := map[string][]string{
		"A": {OpRead, OpUpdate}, "B": {OpRead, OpUpdate}, "C": {OpRead},
		"D": {OpRead, OpInsert}, "E": {OpScan, OpInsert}, "F": {OpRead, OpUpdate, OpRMW},
	}
	for _, w := range Workloads {
		res := run(&w)
		for _, op := range []string{OpRead, OpUpdate, OpInsert, OpScan, OpRMW} {
			_, got := res.Ops[op]
			want := false
			for _, k := range kinds[w.Name] {
				want = want || k == op
			}
			if got != want {
				t.Errorf("workload %s: %s measured %v, want %v", w.Name, op, got, want)
			}
		}
		// F updates only in its read-modify-writes: one update each.
		if w.Name == "F" && res.Ops[OpUpdate].Count != res.Ops[OpRMW].Count {
			t.Errorf("F: %d updates, %d read-modify-writes", res.Ops[OpUpdate].Count, res.Ops[OpRMW].Count)
		}
	}
	// D inserted new records after the loaded ones.
	if len(db.records) <= int(s.Records) {
		t.Errorf("workload D inserted nothing: %d records", len(db.records))
	}
}

func TestPhaseRejectsTooFewOperations(t *testing.T) {
	wl, err := newCoreWorkload(DefaultSizing.properties(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (phase{workload: wl, db: newMemDB(), threads: 8, total: 4}).run(context.Background()); err == nil {
		t.Fatal("4 operations on 8 threads: no error")
	}
}
