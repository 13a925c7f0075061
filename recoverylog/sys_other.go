//go:build !linux

package recoverylog

import "os"

// startWriteback does nothing where the system has no way to start a
// file's writeback without waiting for it: the final Sync does it all.
func startWriteback(*os.File) error { return nil }

// writeAtv writes bufs one after another at offset of f.
func writeAtv(f *os.File, bufs [][]byte, offset int64) error {
	for _, b := range bufs {
		if _, err := f.WriteAt(b, offset); err != nil {
			return err
		}
		offset += int64(len(b))
	}
	return nil
}
