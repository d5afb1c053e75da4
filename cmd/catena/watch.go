package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

const watchSynopsis = "catena watch [PREFIX] [-key] [-from POSITION] [flags]"

const watchDescription = `watch prints each change to the keys with PREFIX (every key without one;
with -key, to the key PREFIX alone) once it commits, one line each:

  put KEY VALUE rev VOLUME:REVISION [expires DEADLINE]
  delete KEY rev VOLUME:REVISION
  expire KEY rev VOLUME:REVISION

VALUE is printed as get prints it; a hash's as (hash) FIELD=VALUE ....
A revision numbers the changes of one volume, so a watch has a revision
per volume it follows: its position. When the watch ends (Ctrl-C,
-timeout, exit status 0) or fails (1), it prints "position P" last;
watch -from P goes on from there, nothing lost or repeated. A member keeps only a volume's
latest updates in memory: a watch from before them fails (exit status 1)
naming the oldest revision it can start at; read the keys again, then
watch from it. Strong keyspaces only (docs/operations.md, "Watching
keys").`

// runWatch runs catena watch.
func runWatch(_ string, args []string, _ io.Reader, stdout io.Writer) error {
	fs := cli.NewFlagSet("watch", watchSynopsis, watchDescription)
	cluster := registerClientFlags(fs)
	noTimeout(fs)
	fs.Lookup("timeout").Usage = "stop watching after this long, printing the position as Ctrl-C does (0: watch until interrupted)"
	exact := fs.Bool("key", false, "watch the key PREFIX itself, not every key it begins")
	from := fs.String("from", "", "resume from the `POSITION` a watch of the same PREFIX printed (VOLUME:REVISION,...): print every change after it")
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) > 1 {
		return cli.UsageErrorf("want at most one PREFIX, got %d arguments (usage: %s)", len(args), watchSynopsis)
	}
	prefix := ""
	if len(args) == 1 {
		prefix = args[0]
	}
	op := wire.Op{Kind: wire.OpWatch, Key: prefix, Delta: wire.WatchFromNow}
	var opts []client.WatchOption
	if *exact {
		if prefix == "" {
			return cli.UsageErrorf("-key watches the key given as PREFIX: give it (usage: %s)", watchSynopsis)
		}
		op.Value = []byte{wire.WatchExactKey}
		opts = append(opts, client.WatchKey())
	}
	if *from != "" {
		pos, err := parseWatchPosition(*from)
		if err != nil {
			return cli.UsageErrorf("-from: %v", err)
		}
		opts = append(opts, client.WatchFrom(pos))
	}
	// Refuse a key or prefix no watch takes before connecting.
	if err := kv.Validate(op); err != nil {
		return err
	}
	ctx, cancel := commandContext(cluster)
	defer cancel()
	c, err := cluster.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return printWatch(ctx, c, stdout, prefix, opts...)
}

// printWatch watches prefix until ctx ends or the watch fails, printing
// each event, then the position to resume from. A compacted watch
// prints no position (its error says where to start again), nor does
// one the cluster cannot serve (a causal keyspace's keys).
func printWatch(ctx context.Context, c *client.Client, stdout io.Writer, prefix string, opts ...client.WatchOption) error {
	w, err := c.Watch(ctx, prefix, opts...)
	if err != nil {
		return err
	}
	defer w.Close()
	var written error
	for e := range w.Events() { // (closed once the watch ends, after its last event)
		if written != nil {
			continue
		}
		if written = printEvent(stdout, e); written != nil {
			w.Close()
		}
	}
	if written != nil {
		return written
	}
	pos := w.Position()
	var compacted *client.CompactedError
	if errors.As(w.Err(), &compacted) {
		at := pos[compacted.Volume]
		pos[compacted.Volume] = int64(compacted.Oldest)
		return fmt.Errorf("%w; the changes after revision %d are gone: read the keys again (catena scan, catena get), then watch -from %s",
			w.Err(), at, formatWatchPosition(pos))
	}
	if errors.Is(w.Err(), client.ErrInvalid) {
		return w.Err()
	}
	if _, err := fmt.Fprintf(stdout, "position %s\n", formatWatchPosition(pos)); err != nil {
		return err
	}
	return w.Err()
}

// printEvent prints one line for e (catena watch -h shows the forms).
func printEvent(w io.Writer, e client.Event) error {
	rev := fmt.Sprintf("rev %d:%d", e.Volume, e.Revision)
	if e.Kind != client.EventPut {
		_, err := fmt.Fprintf(w, "%s %s %s\n", e.Kind, e.Key, rev)
		return err
	}
	value := e.Value
	if e.Hash {
		fields, err := kv.DecodeFields(e.Value)
		if err != nil {
			return fmt.Errorf("the hash %s at %s: %w", e.Key, rev, err)
		}
		value = []byte("(hash)")
		for _, f := range fields {
			value = fmt.Appendf(value, " %s=%s", f.Name, f.Value)
		}
	}
	expires := ""
	if !e.Expires.IsZero() {
		expires = " expires " + e.Expires.UTC().Format(time.RFC3339Nano)
	}
	_, err := fmt.Fprintf(w, "put %s %s %s%s\n", e.Key, value, rev, expires)
	return err
}

// formatWatchPosition formats p as -from takes it: VOLUME:REVISION for
// each volume, in volume order, separated by commas.
func formatWatchPosition(p client.WatchPosition) string {
	var b strings.Builder
	for i, v := range slices.Sorted(maps.Keys(p)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", v, p[v])
	}
	return b.String()
}

// parseWatchPosition parses what formatWatchPosition formats: at least
// one volume, none twice, each at a revision from -1 (watched from the
// moment the watch first asked it: a position printed before then).
func parseWatchPosition(s string) (client.WatchPosition, error) {
	p := client.WatchPosition{}
	for _, part := range strings.Split(s, ",") {
		volume, revision, ok := strings.Cut(strings.TrimSpace(part), ":")
		v, verr := strconv.ParseUint(volume, 10, 32)
		r, rerr := strconv.ParseInt(revision, 10, 64)
		switch {
		case !ok || verr != nil || rerr != nil:
			return nil, fmt.Errorf("%q: want VOLUME:REVISION[,VOLUME:REVISION...], as a watch's position line prints it", s)
		case r < wire.WatchFromNow:
			return nil, fmt.Errorf("%q: revision %d of volume %d is below -1", s, r, v)
		}
		if _, dup := p[uint32(v)]; dup {
			return nil, fmt.Errorf("%q: volume %d given twice", s, v)
		}
		p[uint32(v)] = r
	}
	return p, nil
}
