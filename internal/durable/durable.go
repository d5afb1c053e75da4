// Package durable writes files that survive a crash whole or not at all.
package durable

import (
	"os"
	"path/filepath"
)

// WriteFile writes data to path atomically and durably: into path.tmp,
// synced, renamed over path, and the directory synced, so after a crash
// path holds either its old contents or data.
func WriteFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir makes the entries of dir (files created, renamed or removed
// in it) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
