// Package backup takes online backups of a Catena cluster and restores
// them into a new one (docs/adr/0030-backup-and-restore.md).
//
// A backup is a directory: one file per volume, holding the volume's
// objects as one frozen state read where its updates are answered
// (client.ExportVolume),
// and manifest.json, written last, naming every volume file with its
// SHA-256, plus the cluster's keyspaces and its users and roles. A
// directory without a manifest is a backup that did not finish: Run
// resumes it, Restore refuses it.
package backup

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/durable"
	"github.com/catena-kv/catena/internal/kv"
)

// Format names a backup's manifest; FormatVersion is the layout this
// release writes and the newest it reads.
const (
	Format        = "catena-backup"
	FormatVersion = 1
	// ManifestFile is the manifest's name in a backup directory.
	ManifestFile = "manifest.json"
	// volumeMagic starts every volume file.
	volumeMagic = "catena-volume 1\n"
)

// Manifest describes a finished backup.
type Manifest struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Release is the catena release that took the backup.
	Release string `json:"release"`
	// Started and Finished bound the backup. FrozenFrom and FrozenTo
	// bound the moments the volumes' states were frozen (the backup asks
	// every volume for its first page at once): each state holds every
	// write acknowledged before FrozenFrom and none begun after FrozenTo.
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	FrozenFrom time.Time `json:"frozen_from"`
	FrozenTo   time.Time `json:"frozen_to"`
	// Keyspaces are the keyspaces backed up (every one, or those named).
	Keyspaces []client.Keyspace `json:"keyspaces"`
	// Auth holds the users (with their password hashes) and roles.
	Auth    *client.Auth `json:"auth,omitempty"`
	Volumes []Volume     `json:"volumes"`
}

// Volume is one volume's file in a backup.
type Volume struct {
	Volume   uint32 `json:"volume"`
	Keyspace string `json:"keyspace"`
	// SN is the sequence number of the last update the state holds.
	SN      uint64 `json:"sn"`
	Objects int64  `json:"objects"`
	File    string `json:"file"`
	Bytes   int64  `json:"bytes"`
	SHA256  string `json:"sha256"`
	// FrozenFrom and FrozenTo bound when the volume's state was frozen.
	FrozenFrom time.Time `json:"frozen_from"`
	FrozenTo   time.Time `json:"frozen_to"`
	// Splits is how many times the volume's keyspace had been split
	// when the volume was read: its file holds only the keys that
	// keyspace map routes to the volume (docs/adr/0031).
	Splits int `json:"splits,omitempty"`
}

// Object is one object of a volume file.
type Object struct {
	Key   string
	Value []byte
	// Expires is the deadline (zero: none).
	Expires time.Time
	// Hash: Value holds a hash's fields (kv.EncodeFields).
	Hash bool
}

// ErrCorrupt is wrapped by every error about a backup that cannot be
// trusted: missing, truncated, altered or unknown files.
var ErrCorrupt = errors.New("corrupt or partial backup")

// volumeFileName is the file of volume v.
func volumeFileName(v uint32) string { return fmt.Sprintf("volume-%05d.data", v) }

// volumeWriter writes a volume file: the magic, then each object as its
// key, value (each with its length first, uvarints), deadline (Unix
// nanoseconds, uvarint; 0: none) and a type byte (0 string, 1 hash),
// then a trailer: a zero key length and the count of objects. Keys are
// never empty, so the trailer cannot be mistaken for an object.
type volumeWriter struct {
	f       *os.File
	w       *bufio.Writer
	sum     hash.Hash
	objects int64
	bytes   int64
	buf     []byte
}

func createVolumeFile(path string) (*volumeWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	vw := &volumeWriter{f: f, sum: sha256.New()}
	vw.w = bufio.NewWriterSize(io.MultiWriter(f, vw.sum), 1<<20)
	if err := vw.write([]byte(volumeMagic)); err != nil {
		f.Close()
		return nil, err
	}
	return vw, nil
}

func (vw *volumeWriter) write(b []byte) error {
	vw.bytes += int64(len(b))
	_, err := vw.w.Write(b)
	return err
}

// add writes one object.
func (vw *volumeWriter) add(o client.ExportedObject) error {
	b := vw.buf[:0]
	b = binary.AppendUvarint(b, uint64(len(o.Key)))
	b = append(b, o.Key...)
	b = binary.AppendUvarint(b, uint64(len(o.Value)))
	b = append(b, o.Value...)
	var expires uint64
	if !o.Expires.IsZero() {
		expires = uint64(o.Expires.UnixNano())
	}
	b = binary.AppendUvarint(b, expires)
	typ := byte(0)
	if o.Hash {
		typ = 1
	}
	b = append(b, typ)
	vw.buf = b
	vw.objects++
	return vw.write(b)
}

// finish writes the trailer, syncs and closes the file, and returns its
// size and SHA-256.
func (vw *volumeWriter) finish() (int64, string, error) {
	b := binary.AppendUvarint([]byte{0}, uint64(vw.objects))
	if err := vw.write(b); err != nil {
		vw.f.Close()
		return 0, "", err
	}
	if err := vw.w.Flush(); err != nil {
		vw.f.Close()
		return 0, "", err
	}
	if err := vw.f.Sync(); err != nil {
		vw.f.Close()
		return 0, "", err
	}
	if err := vw.f.Close(); err != nil {
		return 0, "", err
	}
	return vw.bytes, hex.EncodeToString(vw.sum.Sum(nil)), nil
}

// abandon closes the file without finishing it.
func (vw *volumeWriter) abandon() { vw.f.Close() }

// readVolumeFile checks a volume file against its manifest entry (size,
// SHA-256, layout, count) and calls each, if not nil, with every object
// in order. The whole file is checked before the first call: a corrupt
// file calls each with nothing.
func readVolumeFile(dir string, v Volume, each func(Object) error) error {
	path := filepath.Join(dir, v.File)
	if v.File != volumeFileName(v.Volume) {
		return fmt.Errorf("%w: volume %d's file is named %q, want %q", ErrCorrupt, v.Volume, v.File, volumeFileName(v.Volume))
	}
	if err := checkFile(path, v); err != nil {
		return err
	}
	if err := decodeVolumeFile(path, v, nil); err != nil {
		return err
	}
	if each == nil {
		return nil
	}
	return decodeVolumeFile(path, v, each)
}

// checkFile compares a file's size and SHA-256 with v's.
func checkFile(path string, v Volume) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: volume %d: %w", ErrCorrupt, v.Volume, err)
	}
	defer f.Close()
	sum := sha256.New()
	n, err := io.Copy(sum, f)
	if err != nil {
		return fmt.Errorf("%w: volume %d: %w", ErrCorrupt, v.Volume, err)
	}
	if n != v.Bytes {
		return fmt.Errorf("%w: %s holds %d bytes, the manifest says %d", ErrCorrupt, v.File, n, v.Bytes)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != v.SHA256 {
		return fmt.Errorf("%w: %s's SHA-256 is %s, the manifest says %s", ErrCorrupt, v.File, got, v.SHA256)
	}
	return nil
}

// decodeVolumeFile parses a volume file, calling each (if not nil) with
// every object.
func decodeVolumeFile(path string, v Volume, each func(Object) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: volume %d: %w", ErrCorrupt, v.Volume, err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrCorrupt, v.File, fmt.Sprintf(format, args...))
	}
	magic := make([]byte, len(volumeMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != volumeMagic {
		return bad("not a volume file of this format")
	}
	bytesOf := func(what string, limit uint64) ([]byte, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, bad("%s truncated", what)
		}
		if n > limit {
			return nil, bad("%s of %d bytes exceeds %d", what, n, limit)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, bad("%s truncated", what)
		}
		return b, nil
	}
	var count int64
	last := ""
	for {
		keyLen, err := binary.ReadUvarint(r)
		if err != nil {
			return bad("truncated after %d objects", count)
		}
		if keyLen == 0 {
			break
		}
		if keyLen > kv.KeySizeMax {
			return bad("key of %d bytes exceeds %d", keyLen, kv.KeySizeMax)
		}
		key := make([]byte, keyLen)
		if _, err := io.ReadFull(r, key); err != nil {
			return bad("key truncated")
		}
		if count > 0 && string(key) <= last {
			return bad("keys out of order at %q", key)
		}
		value, err := bytesOf("value", kv.ValueSizeMax)
		if err != nil {
			return err
		}
		expires, err := binary.ReadUvarint(r)
		if err != nil || expires > uint64(kv.ExpiresMax) {
			return bad("bad deadline of %q", key)
		}
		typ, err := r.ReadByte()
		if err != nil || typ > 1 {
			return bad("bad type of %q", key)
		}
		count++
		last = string(key)
		if each == nil {
			continue
		}
		o := Object{Key: string(key), Value: value, Hash: typ == 1}
		if expires != 0 {
			o.Expires = time.Unix(0, int64(expires))
		}
		if err := each(o); err != nil {
			return err
		}
	}
	n, err := binary.ReadUvarint(r)
	if err != nil || int64(n) != count {
		return bad("the trailer counts %d objects, the file holds %d", n, count)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return bad("bytes after the trailer")
	}
	if count != v.Objects {
		return bad("holds %d objects, the manifest says %d", count, v.Objects)
	}
	return nil
}

// writeJSON writes v to path as indented JSON, atomically and durably.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(path, append(data, '\n'))
}

// ReadManifest reads and checks a backup's manifest: its format and
// version, and that it names each volume once.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("%w: %s has no %s: the backup did not finish (run catena backup again with the same -out to resume it)", ErrCorrupt, dir, ManifestFile)
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrCorrupt, ManifestFile, err)
	}
	switch {
	case m.Format != Format:
		return m, fmt.Errorf("%w: %s is not a catena backup manifest (format %q)", ErrCorrupt, ManifestFile, m.Format)
	case m.Version < 1 || m.Version > FormatVersion:
		return m, fmt.Errorf("%w: backup format version %d; this release reads up to %d", ErrCorrupt, m.Version, FormatVersion)
	}
	seen := map[uint32]bool{}
	for _, v := range m.Volumes {
		if seen[v.Volume] {
			return m, fmt.Errorf("%w: volume %d listed twice", ErrCorrupt, v.Volume)
		}
		seen[v.Volume] = true
	}
	for _, ks := range m.Keyspaces {
		for _, v := range ks.VolumeList() {
			if !seen[v] {
				return m, fmt.Errorf("%w: keyspace %s's volume %d has no file", ErrCorrupt, ks.Name, v)
			}
		}
	}
	return m, nil
}

// Verify checks a whole backup: its manifest, and every volume file's
// size, checksum and layout. It returns the manifest.
func Verify(dir string) (Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return m, err
	}
	for _, v := range m.Volumes {
		if err := readVolumeFile(dir, v, nil); err != nil {
			return m, err
		}
	}
	return m, nil
}

// decodeHash returns a hash object's fields.
func decodeHash(o Object) ([]client.Field, error) {
	fields, err := kv.DecodeFields(o.Value)
	if err != nil {
		return nil, fmt.Errorf("%w: hash %q: %w", ErrCorrupt, o.Key, err)
	}
	return fields, nil
}
