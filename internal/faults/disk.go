package faults

import (
	"fmt"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FS returns fs wrapped so that the control file's disk fault applies to
// every file Pebble writes through it (DiskFull, DiskSyncError); with
// none in force every call passes through. A nil injector returns fs
// itself.
func (in *Injector) FS(fs vfs.FS) vfs.FS {
	if in == nil {
		return fs
	}
	return &faultFS{FS: fs, in: in}
}

// errorFor returns the injected error of operation op on path when the
// disk fault in force is one of faults, or nil.
func (in *Injector) errorFor(op, path string, faults ...Disk) error {
	d := in.Faults().Disk
	for _, f := range faults {
		if d == f {
			errno := syscall.ENOSPC
			if d == DiskSyncError {
				errno = syscall.EIO
			}
			return &os.PathError{Op: op, Path: path, Err: injected{errno}}
		}
	}
	return nil
}

// injected is an errno the control file injected: it unwraps to the
// errno (errors.Is(err, syscall.ENOSPC) holds, as Pebble checks), and
// its message says where it came from.
type injected struct{ errno syscall.Errno }

func (e injected) Error() string { return fmt.Sprintf("%v (injected by %s)", e.errno, EnvVar) }
func (e injected) Unwrap() error { return e.errno }

// faultFS is a vfs.FS whose writes and syncs fail under a disk fault.
// Methods it does not override (reads, removals, renames, locks) pass
// through.
type faultFS struct {
	vfs.FS
	in *Injector
}

func (fs *faultFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, in: fs.in, name: name}, nil
}

// Create implements vfs.FS.
func (fs *faultFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.in.errorFor("create", name, DiskFull); err != nil {
		return nil, err
	}
	f, err := fs.FS.Create(name, category)
	return fs.wrap(name, f, err)
}

// Link implements vfs.FS.
func (fs *faultFS) Link(oldname, newname string) error {
	if err := fs.in.errorFor("link", newname, DiskFull); err != nil {
		return err
	}
	return fs.FS.Link(oldname, newname)
}

// MkdirAll implements vfs.FS.
func (fs *faultFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.in.errorFor("mkdir", dir, DiskFull); err != nil {
		return err
	}
	return fs.FS.MkdirAll(dir, perm)
}

// Open implements vfs.FS.
func (fs *faultFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	return fs.wrap(name, f, err)
}

// OpenReadWrite implements vfs.FS.
func (fs *faultFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	return fs.wrap(name, f, err)
}

// OpenDir implements vfs.FS: a directory's Sync fails under
// DiskSyncError like a file's.
func (fs *faultFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	return fs.wrap(name, f, err)
}

// ReuseForWrite implements vfs.FS (Pebble recycles WAL files).
func (fs *faultFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(newname, f, err)
}

// Unwrap implements vfs.FS.
func (fs *faultFS) Unwrap() vfs.FS { return fs.FS }

// faultFile is a vfs.File whose writes and syncs fail under a disk
// fault.
type faultFile struct {
	vfs.File
	in   *Injector
	name string
}

// Write implements vfs.File: under DiskFull it writes the first half of
// p and fails, leaving a partly written record behind as a full disk
// does.
func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.in.errorFor("write", f.name, DiskFull); err != nil {
		n, _ := f.File.Write(p[:len(p)/2])
		return n, err
	}
	return f.File.Write(p)
}

// WriteAt implements vfs.File, as Write.
func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.in.errorFor("write", f.name, DiskFull); err != nil {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, err
	}
	return f.File.WriteAt(p, off)
}

// Preallocate implements vfs.File.
func (f *faultFile) Preallocate(offset, length int64) error {
	if err := f.in.errorFor("fallocate", f.name, DiskFull); err != nil {
		return err
	}
	return f.File.Preallocate(offset, length)
}

// Sync implements vfs.File.
func (f *faultFile) Sync() error {
	if err := f.in.errorFor("fsync", f.name, DiskSyncError); err != nil {
		return err
	}
	return f.File.Sync()
}

// SyncData implements vfs.File.
func (f *faultFile) SyncData() error {
	if err := f.in.errorFor("fdatasync", f.name, DiskSyncError); err != nil {
		return err
	}
	return f.File.SyncData()
}

// SyncTo implements vfs.File.
func (f *faultFile) SyncTo(length int64) (bool, error) {
	if err := f.in.errorFor("sync_file_range", f.name, DiskSyncError); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}
