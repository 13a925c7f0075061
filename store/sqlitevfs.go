package store

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ncruces/go-sqlite3"
	sqlitevfs "github.com/ncruces/go-sqlite3/vfs"
)

// sqliteVFS serves SQLite's files from a Pebble vfs.FS: in production the
// shard's recoverylog.Recorder, which records the database and its WAL,
// written in place, as write-at and truncate ops. Temporary files (sorts,
// statement journals: SQLite opens them without a name) are not state,
// and go to the operating system's temporary directory, unrecorded.
//
// Locks are held in memory only: the store opens its database with one
// connection in exclusive locking mode, and the recovery log's fencing is
// what keeps a second primary out, across machines.
type sqliteVFS struct{ fs vfs.FS }

// sqliteVFSNames numbers the VFSes registered, which SQLite finds by name.
var sqliteVFSNames atomic.Uint64

// register registers v under a new name, which it returns.
func (v sqliteVFS) register() string {
	name := fmt.Sprintf("quire-store-%d", sqliteVFSNames.Add(1))
	sqlitevfs.Register(name, v)
	return name
}

func (v sqliteVFS) Open(name string, flags sqlitevfs.OpenFlag) (sqlitevfs.File, sqlitevfs.OpenFlag, error) {
	if name == "" {
		return sqlitevfs.Find("os").Open(name, flags)
	}
	if flags&sqlitevfs.OPEN_CREATE == 0 {
		if _, err := v.fs.Stat(name); err != nil {
			return nil, flags, sqlite3.CANTOPEN
		}
	}
	f, err := v.fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, flags, fmt.Errorf("store: SQLite opening %s: %w", name, err)
	}
	return &sqliteFile{File: f}, flags, nil
}

func (v sqliteVFS) Delete(name string, dirSync bool) error {
	err := v.fs.Remove(name)
	if errors.Is(err, os.ErrNotExist) {
		return sqlite3.IOERR_DELETE_NOENT
	} else if err != nil || !dirSync {
		return err
	}
	return syncDir(v.fs, v.fs.PathDir(name))
}

func (v sqliteVFS) Access(name string, flags sqlitevfs.AccessFlag) (bool, error) {
	_, err := v.fs.Stat(name)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// FullPathname returns name: the store names its database by the path
// the file system knows it by.
func (v sqliteVFS) FullPathname(name string) (string, error) { return name, nil }

// sqliteFile is a database or WAL file of the store.
type sqliteFile struct {
	vfs.File
	lock sqlitevfs.LockLevel
}

func (f *sqliteFile) Truncate(size int64) error {
	t, ok := f.File.(interface{ Truncate(int64) error })
	if !ok {
		return fmt.Errorf("store: SQLite truncating a %T: %w", f.File, errors.ErrUnsupported)
	}
	return t.Truncate(size)
}

// Sync syncs the file: over a recorder, it waits until every file
// operation before it is in the recovery log.
func (f *sqliteFile) Sync(flags sqlitevfs.SyncFlag) error { return f.File.Sync() }

func (f *sqliteFile) Size() (int64, error) {
	st, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (f *sqliteFile) Lock(lock sqlitevfs.LockLevel) error {
	f.lock = max(f.lock, lock)
	return nil
}

func (f *sqliteFile) Unlock(lock sqlitevfs.LockLevel) error {
	f.lock = min(f.lock, lock)
	return nil
}

func (f *sqliteFile) CheckReservedLock() (bool, error) { return f.lock >= sqlitevfs.LOCK_RESERVED, nil }

func (f *sqliteFile) SectorSize() int { return 4096 }

// DeviceCharacteristics: a write changes no byte outside its range, even
// in a crash (the log holds whole write ops).
func (f *sqliteFile) DeviceCharacteristics() sqlitevfs.DeviceCharacteristic {
	return sqlitevfs.IOCAP_POWERSAFE_OVERWRITE
}
