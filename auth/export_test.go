package auth

import (
	"testing"
	"time"
)

// setRecheck makes files be read again every recheck, for the test.
func setRecheck(t *testing.T, d time.Duration) {
	old := recheck
	recheck = d
	t.Cleanup(func() { recheck = old })
}
