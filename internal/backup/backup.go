package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/durable"
	"github.com/catena-kv/catena/internal/wire"
)

// Options configure a backup.
type Options struct {
	// Client reaches the cluster; its user needs read access to every
	// key backed up and, with authorization on, role admin (for the
	// users' password hashes).
	Client *client.Client
	// Dir is the backup's directory: created if absent; a directory
	// holding an unfinished backup resumes it.
	Dir string
	// Keyspaces names the keyspaces to back up (empty: every one).
	Keyspaces []string
	// Rate bounds the bytes read per second (0: no bound).
	Rate int64
	// Progress, if not nil, receives a progress line every
	// ProgressEvery (0: 2 s) and one per volume.
	Progress      io.Writer
	ProgressEvery time.Duration
	// Release is written into the manifest.
	Release string
}

// startedFile records when an unfinished backup began, so a resumed one
// keeps its bound.
const startedFile = "started.json"

// volumeDoneFile is where a finished volume's manifest entry waits for
// the manifest.
func volumeDoneFile(v uint32) string { return fmt.Sprintf("volume-%05d.json", v) }

// Run takes a backup of the cluster o.Client reaches into o.Dir, volume
// by volume, and writes the manifest last. Volumes an earlier run of
// the same directory finished are kept (after checking them), so an
// interrupted backup resumes where it stopped.
func Run(ctx context.Context, o Options) (Manifest, error) {
	if o.Client == nil || o.Dir == "" {
		return Manifest{}, errors.New("a client and a directory are required")
	}
	if o.Rate < 0 {
		return Manifest{}, fmt.Errorf("rate %d must not be negative", o.Rate)
	}
	if _, err := os.Stat(filepath.Join(o.Dir, ManifestFile)); err == nil {
		return Manifest{}, fmt.Errorf("%s holds a finished backup already; choose another directory", o.Dir)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return Manifest{}, err
	}
	m := Manifest{Format: Format, Version: FormatVersion, Release: o.Release}
	started, err := startTime(o.Dir)
	if err != nil {
		return m, err
	}
	m.Started = started

	if _, err := o.Client.Volumes(ctx); err != nil {
		return m, err
	}
	// The keyspaces as the master holds them now, not as the client last
	// heard: a client behind on a split would back the old map up, and
	// the volumes' states after it lack the keys that moved.
	st, err := o.Client.Status(ctx)
	if err != nil {
		return m, fmt.Errorf("reading the keyspaces: %w", err)
	}
	keyspaces, err := chosenKeyspaces(st.Keyspaces, o.Keyspaces)
	if err != nil {
		return m, err
	}
	m.Keyspaces = keyspaces
	auth, err := o.Client.FetchAuth(ctx)
	if err != nil {
		return m, fmt.Errorf("reading the users and roles: %w", err)
	}
	if len(auth.Users) > 0 || len(auth.Roles) > 0 {
		m.Auth = &auth
	}

	p := newProgress(o.Progress, o.ProgressEvery, "backup")
	limit := newPacer(o.Rate)
	var all []*volumeRead
	for _, ks := range keyspaces {
		for _, v := range ks.VolumeList() {
			vol, resumed, err := resumeVolume(o.Dir, v, ks)
			if err != nil {
				return m, err
			}
			all = append(all, &volumeRead{vol: vol, resumed: resumed, keyspace: ks, volume: v})
		}
	}
	if err := freeze(ctx, o.Client, all, p); err != nil {
		return m, err
	}
	var reading atomic.Int64 // the index of the volume being read
	stopKeeping := keepAlive(ctx, all, &reading)
	defer stopKeeping()
	for i, r := range all {
		reading.Store(int64(i))
		if !r.resumed {
			vol, err := backupVolume(ctx, o, r, p, limit)
			if err != nil {
				return m, fmt.Errorf("volume %d: %w", r.volume, err)
			}
			r.vol = vol
			if err := writeJSON(filepath.Join(o.Dir, volumeDoneFile(r.volume)), vol); err != nil {
				return m, err
			}
		}
		m.Volumes = append(m.Volumes, r.vol)
		p.volumeDone(len(m.Volumes), len(all), r.vol, r.resumed)
	}
	for i, vol := range m.Volumes {
		if i == 0 || vol.FrozenFrom.Before(m.FrozenFrom) {
			m.FrozenFrom = vol.FrozenFrom
		}
		if vol.FrozenTo.After(m.FrozenTo) {
			m.FrozenTo = vol.FrozenTo
		}
	}
	if err := unsplit(ctx, o.Client, keyspaces); err != nil {
		return m, err
	}
	m.Finished = time.Now().UTC()
	if err := writeJSON(filepath.Join(o.Dir, ManifestFile), m); err != nil {
		return m, err
	}
	for _, vol := range m.Volumes {
		os.Remove(filepath.Join(o.Dir, volumeDoneFile(vol.Volume)))
	}
	os.Remove(filepath.Join(o.Dir, startedFile))
	return m, nil
}

// startTime returns when the backup in dir began: now, recorded, for a
// new one.
func startTime(dir string) (time.Time, error) {
	path := filepath.Join(dir, startedFile)
	var s struct{ Started time.Time }
	data, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(data, &s); err != nil {
			return time.Time{}, fmt.Errorf("%s: %w", path, err)
		}
		return s.Started, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return time.Time{}, err
	}
	s.Started = time.Now().UTC()
	return s.Started, writeJSON(path, s)
}

// chosenKeyspaces returns the keyspaces named (all when none is), in the
// cluster's order.
func chosenKeyspaces(all []client.Keyspace, names []string) ([]client.Keyspace, error) {
	if len(names) == 0 {
		return all, nil
	}
	var out []client.Keyspace
	for _, ks := range all {
		if slices.Contains(names, ks.Name) {
			out = append(out, ks)
		}
	}
	for _, name := range names {
		if !slices.ContainsFunc(out, func(ks client.Keyspace) bool { return ks.Name == name }) {
			return nil, fmt.Errorf("the cluster has no keyspace %q", name)
		}
	}
	return out, nil
}

// unsplit checks that no keyspace of the backup was split while it was
// taken: the backup holds each keyspace's volumes as its map at the start
// named them, and a volume read after its split lacks the keys that
// moved to a volume the backup does not hold.
func unsplit(ctx context.Context, c *client.Client, keyspaces []client.Keyspace) error {
	st, err := c.Status(ctx)
	if err != nil {
		return fmt.Errorf("reading the keyspaces again: %w", err)
	}
	for _, ks := range keyspaces {
		for _, k := range st.Keyspaces {
			if k.Name == ks.Name && k.Splits != ks.Splits {
				return fmt.Errorf("keyspace %s was split while the backup was taken (%d volumes at its start, %d now): take it again into a new directory", ks.Name, ks.Volumes, k.Volumes)
			}
		}
	}
	return nil
}

// holds reports whether keyspace ks's map routes key to volume v. A
// volume read while it splits (docs/adr/0031) may still hold the keys
// that move; the volume that gets them holds them too, newer.
func holds(ks client.Keyspace, v uint32, key string) bool {
	if ks.Splits == 0 {
		return true // (a volume holds only its keys)
	}
	return ks.VolumeList()[wire.KeyHash(key)%uint32(ks.Volumes)] == v
}

// resumeVolume returns volume v's entry if an earlier run finished it
// and its file still checks out, under keyspace ks's map as it is now.
func resumeVolume(dir string, v uint32, ks client.Keyspace) (Volume, bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, volumeDoneFile(v)))
	if errors.Is(err, os.ErrNotExist) {
		return Volume{}, false, nil
	}
	if err != nil {
		return Volume{}, false, err
	}
	var vol Volume
	if json.Unmarshal(data, &vol) != nil || vol.Volume != v || vol.Keyspace != ks.Name || vol.Splits != ks.Splits || readVolumeFile(dir, vol, nil) != nil {
		return Volume{}, false, nil // read it again
	}
	return vol, true, nil
}

// volumeRead is one volume of a backup being taken.
type volumeRead struct {
	volume   uint32
	keyspace client.Keyspace
	// vol is the volume's entry, once read (or kept from an earlier
	// run: resumed).
	vol     Volume
	resumed bool
	// x is the volume's export; first its first page (more: others
	// follow), read when the backup froze every volume, between
	// frozenFrom and frozenTo.
	x                    *client.Export
	first                client.ExportPage
	more                 bool
	frozenFrom, frozenTo time.Time
}

// freezeParallel bounds the volumes frozen at once.
const freezeParallel = 16

// freeze asks for the first page of every volume still to read, all at
// once: each member freezes its volume's state then, so the volumes'
// states are from one short window rather than spread over the whole
// backup (the cut, docs/adr/0030).
func freeze(ctx context.Context, c *client.Client, all []*volumeRead, p *progress) error {
	var wg sync.WaitGroup
	errs := make([]error, len(all))
	sem := make(chan struct{}, freezeParallel)
	for i, r := range all {
		if r.resumed {
			continue
		}
		r.x = c.NewExport(r.volume)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r.frozenFrom = time.Now().UTC()
			r.first, r.more, errs[i] = r.x.Next(ctx)
			r.frozenTo = time.Now().UTC()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("volume %d: %w", all[i].volume, err)
		}
	}
	p.frozen(all)
	return nil
}

// keepAliveEvery is how often the frozen states of the volumes not read
// yet are kept (members drop one idle for 30 s).
const keepAliveEvery = 10 * time.Second

// keepAlive keeps, until the returned func is called, the frozen states
// of the volumes after the one being read.
func keepAlive(ctx context.Context, all []*volumeRead, reading *atomic.Int64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(keepAliveEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for i := int(reading.Load()) + 1; i < len(all); i++ {
				if x := all[i].x; x != nil {
					_ = x.KeepAlive(ctx) // (a failure shows in the volume's read)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// backupVolume reads a volume into its file: its first page, then the
// rest.
func backupVolume(ctx context.Context, o Options, r *volumeRead, p *progress, limit *pacer) (Volume, error) {
	final := filepath.Join(o.Dir, volumeFileName(r.volume))
	tmp := final + ".tmp"
	vw, err := createVolumeFile(tmp)
	if err != nil {
		return Volume{}, err
	}
	vol := Volume{Volume: r.volume, Keyspace: r.keyspace.Name, Splits: r.keyspace.Splits, File: volumeFileName(r.volume)}
	page, more := r.first, r.more
	for {
		if page.Restart {
			// The member lost the state this read was on: start the
			// file again, from the state it froze for this page.
			vw.abandon()
			if vw, err = createVolumeFile(tmp); err != nil {
				return Volume{}, err
			}
			p.restarted(r.volume)
		}
		vol.SN = page.SN
		n := 0
		for _, obj := range page.Objects {
			if !holds(r.keyspace, r.volume, obj.Key) {
				continue
			}
			if err := vw.add(obj); err != nil {
				vw.abandon()
				return Volume{}, err
			}
			n += len(obj.Key) + len(obj.Value)
		}
		p.read(len(page.Objects), n)
		if err := limit.wait(ctx, n); err != nil {
			vw.abandon()
			return Volume{}, err
		}
		if !more {
			break
		}
		asked := time.Now().UTC()
		if page, more, err = r.x.Next(ctx); err != nil {
			vw.abandon()
			return Volume{}, err
		}
		if page.Restart {
			r.frozenFrom, r.frozenTo = asked, time.Now().UTC()
		}
	}
	vol.Objects = vw.objects
	vol.FrozenFrom, vol.FrozenTo = r.frozenFrom, r.frozenTo
	if vol.Bytes, vol.SHA256, err = vw.finish(); err != nil {
		return Volume{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return Volume{}, err
	}
	return vol, durable.SyncDir(o.Dir)
}

// pacer holds a reader to a rate of bytes per second.
type pacer struct {
	rate  int64
	start time.Time
	done  int64
}

func newPacer(rate int64) *pacer { return &pacer{rate: rate, start: time.Now()} }

// wait records n bytes read and sleeps until the rate allows them.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p.rate <= 0 {
		return nil
	}
	p.done += int64(n)
	due := p.start.Add(time.Duration(float64(p.done) / float64(p.rate) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// progress prints progress lines.
type progress struct {
	w       io.Writer
	every   time.Duration
	verb    string
	start   time.Time
	last    time.Time
	objects int64
	bytes   int64
}

func newProgress(w io.Writer, every time.Duration, verb string) *progress {
	if every <= 0 {
		every = 2 * time.Second
	}
	now := time.Now()
	return &progress{w: w, every: every, verb: verb, start: now, last: now}
}

// read counts objects and bytes, printing a line when one is due.
func (p *progress) read(objects, bytes int) {
	p.objects += int64(objects)
	p.bytes += int64(bytes)
	if p.w == nil || time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "%s: %d objects, %s, %s/s\n", p.verb, p.objects, mib(p.bytes), mib(int64(float64(p.bytes)/max(time.Since(p.start).Seconds(), 1e-3))))
}

func (p *progress) volumeDone(done, total int, v Volume, resumed bool) {
	if p.w == nil {
		return
	}
	how := ""
	if resumed {
		how = " (kept from an earlier run)"
	}
	fmt.Fprintf(p.w, "%s: volume %d (%d of %d, keyspace %s): %d objects at sn %d%s\n", p.verb, v.Volume, done, total, v.Keyspace, v.Objects, v.SN, how)
}

// frozen prints how close together the volumes were frozen.
func (p *progress) frozen(all []*volumeRead) {
	if p.w == nil {
		return
	}
	var from, to time.Time
	n := 0
	for _, r := range all {
		if r.resumed {
			continue
		}
		if n == 0 || r.frozenFrom.Before(from) {
			from = r.frozenFrom
		}
		if r.frozenTo.After(to) {
			to = r.frozenTo
		}
		n++
	}
	if n > 0 {
		fmt.Fprintf(p.w, "%s: %d volumes frozen within %s\n", p.verb, n, to.Sub(from).Round(time.Millisecond))
	}
}

func (p *progress) restarted(v uint32) {
	if p.w != nil {
		fmt.Fprintf(p.w, "%s: volume %d: the member reading it changed; reading it again from its first key\n", p.verb, v)
	}
}

// mib formats a byte count.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
