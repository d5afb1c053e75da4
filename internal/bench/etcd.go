package bench

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdDB is the YCSB binding of etcd, on the official client (clientv3).
// It maps operations as go-ycsb's etcd binding does, with the record
// encoded as Catena's binding encodes it (record.go) instead of JSON:
//
//   - Read: Get (linearizable, etcd's default);
//   - Insert and full Update: Put;
//   - partial Update: read-merge-write in a transaction conditioned on the
//     record's mod revision, retried on conflict (go-ycsb's binding
//     overwrites the record with the given fields; this keeps the others);
//   - Delete: Delete;
//   - read-modify-write: go-ycsb's Read then Update.
//
// One client is shared by every thread; it spreads requests over the
// members' endpoints.
type EtcdDB struct {
	client     *clientv3.Client
	fieldCount int
}

// NewEtcdDB connects to the cluster at endpoints ("127.0.0.1:2379", ...).
func NewEtcdDB(ctx context.Context, endpoints []string, fieldCount int) (*EtcdDB, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Context:     ctx,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, err
	}
	return &EtcdDB{client: c, fieldCount: fieldCount}, nil
}

// Close implements ycsb.DB.
func (db *EtcdDB) Close() error { return db.client.Close() }

// InitThread implements ycsb.DB.
func (db *EtcdDB) InitThread(ctx context.Context, _, _ int) context.Context { return ctx }

// CleanupThread implements ycsb.DB.
func (db *EtcdDB) CleanupThread(context.Context) {}

// Read implements ycsb.DB.
func (db *EtcdDB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	resp, err := db.client.Get(ctx, recordKey(table, key))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, errNotFound
	}
	return decodeRecord(resp.Kvs[0].Value, fields)
}

// Scan implements ycsb.DB: one range read from the key on.
func (db *EtcdDB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	resp, err := db.client.Get(ctx, recordKey(table, startKey), clientv3.WithRange(clientv3.GetPrefixRangeEnd(table+"/")), clientv3.WithLimit(int64(count)))
	if err != nil {
		return nil, err
	}
	records := make([]map[string][]byte, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := decodeRecord(kv.Value, fields)
		if err != nil {
			return nil, err
		}
		records = append(records, r)
	}
	return records, nil
}

// Update implements ycsb.DB.
func (db *EtcdDB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	k := recordKey(table, key)
	if len(values) >= db.fieldCount {
		_, err := db.client.Put(ctx, k, string(encodeRecord(values)))
		return err
	}
	for {
		resp, err := db.client.Get(ctx, k)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return errNotFound
		}
		merged, err := mergeRecord(resp.Kvs[0].Value, values)
		if err != nil {
			return err
		}
		txn, err := db.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(k, string(merged))).
			Commit()
		if err != nil {
			return err
		}
		if txn.Succeeded {
			return nil
		}
	}
}

// Insert implements ycsb.DB.
func (db *EtcdDB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	_, err := db.client.Put(ctx, recordKey(table, key), string(encodeRecord(values)))
	return err
}

// Delete implements ycsb.DB.
func (db *EtcdDB) Delete(ctx context.Context, table, key string) error {
	if _, err := db.client.Delete(ctx, recordKey(table, key)); err != nil {
		return fmt.Errorf("etcd delete: %w", err)
	}
	return nil
}
