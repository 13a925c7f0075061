package protocol

import (
	"math"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"1500", 1500, ""},
		{"-5", -5, ""},
		{"64MiB", 64 << 20, ""},
		{"1 GiB", 1 << 30, ""},
		{"512KiB", 512 << 10, ""},
		{"3TiB", 3 << 40, ""},
		{"7B", 7, ""},
		{"9223372036854775807", math.MaxInt64, ""},
		{"9223372036854775808", 0, "too large"},
		{"8388608TiB", 0, "too large"},
		{"64MB", 0, `"64MB" is not a size`},
		{"1.5GiB", 0, "is not a size"},
		{"GiB", 0, "is not a size"},
		{"", 0, "is not a size"},
	} {
		got, err := ParseSize(tc.in)
		checkErr(t, "ParseSize("+tc.in+")", err, tc.err)
		if err == nil && got != tc.want {
			t.Errorf("ParseSize(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0", 1: "1", 1500: "1500", 1024: "1KiB", 64 << 20: "64MiB", 4 << 30: "4GiB",
		3 << 40: "3TiB", 1<<20 + 1<<10: "1025KiB", -2048: "-2KiB", math.MaxInt64: "9223372036854775807",
		math.MinInt64: "-8388608TiB",
	} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", time.Hour: "1h", 90 * time.Minute: "1h30m", 30 * time.Second: "30s",
		time.Hour + time.Second: "1h0m1s", 1500 * time.Millisecond: "1.5s", 0: "0s", -time.Hour: "-1h",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(formatDuration(d)); err != nil || back != d {
			t.Errorf("ParseDuration(formatDuration(%v)) = %v, %v", d, back, err)
		}
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
