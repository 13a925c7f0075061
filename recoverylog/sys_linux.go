package recoverylog

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback starts writing f's dirty pages to disk, without waiting
// for them or for its metadata: a later Sync has less to wait for.
func startWriteback(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.Name(), Err: serr}
	}
	return nil
}

// writeAtv writes bufs one after another at offset of f, in one system
// call unless it writes short.
func writeAtv(f *os.File, bufs [][]byte, offset int64) error {
	if len(bufs) == 1 {
		_, err := f.WriteAt(bufs[0], offset)
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var n int
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		n, werr = unix.Pwritev(int(fd), bufs, offset)
		return werr != unix.EAGAIN
	}); err != nil {
		return err
	}
	if werr != nil {
		return &os.PathError{Op: "pwritev", Path: f.Name(), Err: werr}
	}
	// A short write: the rest, one buffer at a time.
	for _, b := range bufs {
		if n >= len(b) {
			n -= len(b)
			offset += int64(len(b))
			continue
		}
		if _, err := f.WriteAt(b[n:], offset+int64(n)); err != nil {
			return err
		}
		offset += int64(len(b))
		n = 0
	}
	return nil
}
