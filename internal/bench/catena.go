package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/catena-kv/catena/client"
)

// errNotFound is a read of a record that does not exist; YCSB counts it as
// a failed operation (go-ycsb's etcd binding does the same).
var errNotFound = errors.New("bench: record not found")

// errScan: no binding here runs YCSB's scans (workload E).
var errScan = errors.New("bench: scans are not supported")

// CatenaDB is the YCSB binding of Catena, on the native Go client.
//
//   - Read: Get of the record, decoded (records are stored encoded as one
//     value, see record.go);
//   - Insert: Put;
//   - Update: Put when it writes every field (as the comparison runs it,
//     writeallfields=true); otherwise read-merge-write with a
//     CompareAndSet loop, so concurrent partial updates do not lose fields;
//   - Delete: Delete;
//   - read-modify-write (workload F) is go-ycsb's: a Read, then an Update,
//     two independent operations, as for every other binding.
//
// One client.Client is shared by every thread (PerThread false) or each
// thread dials its own. A shared client pipelines all threads' requests
// over one connection to the head and one to the tail.
type CatenaDB struct {
	master     string
	opts       client.Options
	fieldCount int
	perThread  bool

	shared *client.Client
	mu     sync.Mutex
	all    []*client.Client
}

type catenaClientKey struct{}

// NewCatenaDB connects to the cluster whose master is at masterAddr;
// every client dials with opts (TLS, say).
func NewCatenaDB(ctx context.Context, masterAddr string, fieldCount int, perThread bool, opts client.Options) (*CatenaDB, error) {
	db := &CatenaDB{master: masterAddr, fieldCount: fieldCount, perThread: perThread, opts: opts}
	if !perThread {
		c, err := client.Dial(ctx, masterAddr, opts)
		if err != nil {
			return nil, err
		}
		db.shared = c
		db.all = append(db.all, c)
	}
	return db, nil
}

// Close closes every client.
func (db *CatenaDB) Close() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, c := range db.all {
		c.Close()
	}
	db.all = nil
	return nil
}

// InitThread dials the thread's own client when clients are per thread.
func (db *CatenaDB) InitThread(ctx context.Context, _, _ int) context.Context {
	if !db.perThread {
		return ctx
	}
	c, err := client.Dial(ctx, db.master, db.opts)
	if err != nil {
		return ctx // operations fail with errNoClient
	}
	db.mu.Lock()
	db.all = append(db.all, c)
	db.mu.Unlock()
	return context.WithValue(ctx, catenaClientKey{}, c)
}

// CleanupThread closes the thread's own client, if it has one: each
// phase's threads dial their own, so the clients open are the running
// threads' (Close closes the shared one).
func (db *CatenaDB) CleanupThread(ctx context.Context) {
	c, ok := ctx.Value(catenaClientKey{}).(*client.Client)
	if !ok {
		return
	}
	db.mu.Lock()
	db.all = slices.DeleteFunc(db.all, func(x *client.Client) bool { return x == c })
	db.mu.Unlock()
	c.Close()
}

var errNoClient = errors.New("bench: thread has no Catena client")

func (db *CatenaDB) client(ctx context.Context) (*client.Client, error) {
	if db.shared != nil {
		return db.shared, nil
	}
	if c, ok := ctx.Value(catenaClientKey{}).(*client.Client); ok {
		return c, nil
	}
	return nil, errNoClient
}

func recordKey(table, key string) string { return table + "/" + key }

// Read implements ycsb.DB.
func (db *CatenaDB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	c, err := db.client(ctx)
	if err != nil {
		return nil, err
	}
	value, found, err := c.Get(ctx, recordKey(table, key))
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errNotFound
	}
	return decodeRecord(value, fields)
}

// Scan implements ycsb.DB; Catena has no range reads.
func (db *CatenaDB) Scan(context.Context, string, string, int, []string) ([]map[string][]byte, error) {
	return nil, errScan
}

// Update implements ycsb.DB.
func (db *CatenaDB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	c, err := db.client(ctx)
	if err != nil {
		return err
	}
	k := recordKey(table, key)
	if len(values) >= db.fieldCount {
		return c.Put(ctx, k, encodeRecord(values))
	}
	old, found, err := c.Get(ctx, k)
	for {
		if err != nil {
			return err
		}
		if !found {
			return errNotFound
		}
		merged, err := mergeRecord(old, values)
		if err != nil {
			return err
		}
		swapped, current, exists, err := c.CompareAndSet(ctx, k, old, merged)
		if err != nil || swapped {
			return err
		}
		old, found = current, exists
		if bytes.Equal(old, merged) {
			return nil
		}
	}
}

// Insert implements ycsb.DB.
func (db *CatenaDB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	c, err := db.client(ctx)
	if err != nil {
		return err
	}
	return c.Put(ctx, recordKey(table, key), encodeRecord(values))
}

// Delete implements ycsb.DB.
func (db *CatenaDB) Delete(ctx context.Context, table, key string) error {
	c, err := db.client(ctx)
	if err != nil {
		return err
	}
	if _, err := c.Delete(ctx, recordKey(table, key)); err != nil {
		return fmt.Errorf("catena delete: %w", err)
	}
	return nil
}

// CausalMetadata returns the causal metadata size of each client the
// binding has open (client.Client.CausalMetadata): the shared client, or
// one per thread.
func (db *CatenaDB) CausalMetadata() []client.MetadataSize {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make([]client.MetadataSize, 0, len(db.all))
	for _, c := range db.all {
		out = append(out, c.CausalMetadata())
	}
	return out
}

// ResetCausalMetadataPeaks starts every client's peak again.
func (db *CatenaDB) ResetCausalMetadataPeaks() {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, c := range db.all {
		c.ResetCausalMetadataPeak()
	}
}
