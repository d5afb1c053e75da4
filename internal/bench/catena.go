package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/catena-kv/catena/client"
)

// errNotFound is a read of a record that does not exist; YCSB counts it as
// a failed operation (go-ycsb's etcd binding does the same).
var errNotFound = errors.New("bench: record not found")

// errScan: the Redis bindings run no YCSB scans (workload E).
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

// scanGetsMax bounds the record reads one Scan has in flight.
const scanGetsMax = 16

// Scan implements ycsb.DB: the keys of the range from every volume
// (client.KeysFrom), then their records, read in parallel.
func (db *CatenaDB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	c, err := db.client(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := c.KeysFrom(ctx, recordKey(table, startKey), count)
	if err != nil {
		return nil, err
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return !strings.HasPrefix(k, table+"/") })
	records := make([]map[string][]byte, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	// At most scanGetsMax reads in flight per scan: 32 threads of 100
	// would exceed what a server takes on one connection
	// (transport.ClientInFlightMaxDefault) and be refused.
	slots := make(chan struct{}, scanGetsMax)
	for i, k := range keys {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			value, found, err := c.Get(ctx, k)
			switch {
			case err != nil:
				errs[i] = err
			case found:
				records[i], errs[i] = decodeRecord(value, fields)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// A key deleted between the two reads is left out.
	return slices.DeleteFunc(records, func(r map[string][]byte) bool { return r == nil }), nil
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
