package bench

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// RedisDB is the YCSB binding of Redis, on go-redis. Against Redis it maps
// operations as go-ycsb's Redis binding does with its default "hash" data
// type: a record is a hash, one hash field per YCSB field.
//
//   - Read: HMGET of the requested fields;
//   - Insert and Update: HSET of the given fields (a native merge);
//   - Delete: DEL;
//   - read-modify-write: go-ycsb's Read then Update.
//
// Catena's Redis-protocol proxy runs the same binding: a record is a
// hash there too (docs/adr/0029).
//
// One client is shared by every thread, with a connection pool as large as
// the thread count (Redis answers one command per connection at a time).
type RedisDB struct {
	client *redis.Client
	// clients, when set, are several servers' (NewRedisSpreadDB): each
	// thread uses one, thread i the (i mod n)th.
	clients []*redis.Client
}

// threadKey is the context key of a thread's client index.
type threadKey struct{}

// NewRedisSpreadDB connects to several Redis-protocol servers of one
// cluster (Catena servers' own front ends) and spreads the threads over
// them.
func NewRedisSpreadDB(ctx context.Context, addrs []string, threads int) (*RedisDB, error) {
	db := &RedisDB{}
	per := max(1, (threads+len(addrs)-1)/len(addrs))
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, PoolSize: per, MinIdleConns: per})
		if err := c.Ping(ctx).Err(); err != nil {
			c.Close()
			db.Close()
			return nil, err
		}
		db.clients = append(db.clients, c)
	}
	db.client = db.clients[0]
	return db, nil
}

// clientOf returns the client of the thread ctx belongs to.
func (db *RedisDB) clientOf(ctx context.Context) *redis.Client {
	if i, ok := ctx.Value(threadKey{}).(int); ok && len(db.clients) > 0 {
		return db.clients[i%len(db.clients)]
	}
	return db.client
}

// NewRedisDB connects to the Redis-protocol server (Redis, or Catena's
// proxy) at addr.
func NewRedisDB(ctx context.Context, addr string, threads int) (*RedisDB, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: threads, MinIdleConns: threads})
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return &RedisDB{client: c}, nil
}

// Close implements ycsb.DB.
func (db *RedisDB) Close() error {
	if len(db.clients) == 0 {
		return db.client.Close()
	}
	for _, c := range db.clients {
		c.Close()
	}
	return nil
}

// InitThread implements ycsb.DB: a thread of a spread binding takes its
// server.
func (db *RedisDB) InitThread(ctx context.Context, thread, _ int) context.Context {
	return context.WithValue(ctx, threadKey{}, thread)
}

// CleanupThread implements ycsb.DB.
func (db *RedisDB) CleanupThread(context.Context) {}

// Read implements ycsb.DB.
func (db *RedisDB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	k := recordKey(table, key)
	if len(fields) == 0 {
		m, err := db.clientOf(ctx).HGetAll(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			return nil, errNotFound
		}
		out := make(map[string][]byte, len(m))
		for f, v := range m {
			out[f] = []byte(v)
		}
		return out, nil
	}
	vals, err := db.clientOf(ctx).HMGet(ctx, k, fields...).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(fields))
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[fields[i]] = []byte(s)
		}
	}
	if len(out) == 0 {
		return nil, errNotFound
	}
	return out, nil
}

// Scan implements ycsb.DB.
func (db *RedisDB) Scan(context.Context, string, string, int, []string) ([]map[string][]byte, error) {
	return nil, errScan
}

// Update implements ycsb.DB.
func (db *RedisDB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	return db.hset(ctx, recordKey(table, key), values)
}

// Insert implements ycsb.DB.
func (db *RedisDB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	return db.hset(ctx, recordKey(table, key), values)
}

// hset writes the fields; string(v) copies each value, which go-ycsb
// reuses once the call returns.
func (db *RedisDB) hset(ctx context.Context, key string, values map[string][]byte) error {
	args := make([]any, 0, 2*len(values))
	for f, v := range values {
		args = append(args, f, string(v))
	}
	return db.clientOf(ctx).HSet(ctx, key, args...).Err()
}

// Delete implements ycsb.DB.
func (db *RedisDB) Delete(ctx context.Context, table, key string) error {
	if err := db.clientOf(ctx).Del(ctx, recordKey(table, key)).Err(); err != nil {
		return fmt.Errorf("redis delete: %w", err)
	}
	return nil
}
