package protocol

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// sizeUnits are the suffixes ParseSize accepts, largest first.
var sizeUnits = []struct {
	suffix string
	shift  uint
}{
	{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0},
}

// ParseSize parses a byte count: an integer ("1048576"), or an integer
// followed by one of the binary units B, KiB, MiB, GiB and TiB ("64MiB",
// "1 GiB"). Decimal units (KB, MB, GB) are refused as ambiguous.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	num, shift := t, uint(0)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			num, shift = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return 0, fmt.Errorf("%q is not a size (want an integer number of bytes, or one followed by B, KiB, MiB, GiB or TiB)", s)
	}
	if n > math.MaxInt64>>shift || n < math.MinInt64>>shift {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n << shift, nil
}

// FormatSize formats n with the largest binary unit that divides it
// exactly, as ParseSize reads it: 67108864 is "64MiB", 1500 is "1500".
// Specs use it; reports use HumanSize.
func FormatSize(n int64) string {
	if n != 0 {
		for _, u := range sizeUnits[:4] {
			if n%(1<<u.shift) == 0 {
				return strconv.FormatInt(n>>u.shift, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(n, 10)
}

// HumanSize formats n bytes for people, rounded, in the largest binary
// unit it reaches: "1023 B", "1.5 KiB", "5.0 MiB". Reports use it;
// specs use FormatSize, which is exact, and which ParseSize reads back.
func HumanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// formatDuration formats d as time.Duration.String does, less trailing
// zero units: "1m" rather than "1m0s", "1h30m" rather than "1h30m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
