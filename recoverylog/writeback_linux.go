package recoverylog

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback starts writing f's dirty pages to disk, without waiting
// for them or for its metadata: a later Sync has less to wait for.
func startWriteback(f *os.File) error {
	return unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
