package hostport

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		addr string
		lo   int
		want string // in the error; "" for none
	}{
		{"127.0.0.1:7700", 1, ""},
		{"localhost:0", 0, ""},
		{":7700", 1, ""},
		{"[::1]:65535", 1, ""},
		{"localhost:0", 1, `port "0" is not a number from 1 to 65535`},
		{"7700", 0, "want host:port"},
		{"host:65536", 0, `port "65536"`},
		{"host:http", 0, `port "http"`},
		{"host:-1", 0, `port "-1"`},
	} {
		err := Check("--listen", tc.addr, tc.lo)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), `--listen "`+tc.addr+`"`)) {
			t.Errorf("Check(%q, lo %d) = %v, want an error with %q", tc.addr, tc.lo, err, tc.want)
		}
	}
}
