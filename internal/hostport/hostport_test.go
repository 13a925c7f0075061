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

func TestCheckList(t *testing.T) {
	for _, tc := range []struct {
		list string
		want string // in the error; "" for none
	}{
		{"127.0.0.1:7700", ""},
		{"a:1, b:2,c:3", ""},
		{"", "--broker is empty"},
		{" ", "--broker is empty"},
		{"a:1,,b:2", `--broker "a:1,,b:2": an address is empty`},
		{"a:1,b", `--broker "b": want host:port`},
		{"a:0", `--broker "a:0": port "0" is not a number from 1`},
	} {
		err := CheckList("--broker", tc.list)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckList(%q) = %v, want an error with %q", tc.list, err, tc.want)
		}
	}
	if got := Split(" a:1 ,b:2"); len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Errorf("Split = %q", got)
	}
}

func TestCheckEtcd(t *testing.T) {
	for _, tc := range []struct {
		list string
		want string // in the error; "" for none
	}{
		{"127.0.0.1:7701", ""},
		{"http://127.0.0.1:7701", ""},
		{"https://etcd-0:2379, https://etcd-1:2379/", ""},
		{"", "--etcd is empty"},
		{"a:1,,b:2", "an endpoint is empty"},
		{"unix://sock", `endpoint "unix://sock": want http:// or https://, or no scheme`},
		{"http://etcd", `endpoint "http://etcd": want host:port, http://host:port or https://host:port`},
		{"etcd", `--etcd "etcd": endpoint "etcd"`},
		{"http://etcd:port", `port "port"`},
	} {
		err := CheckEtcd("--etcd", tc.list)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckEtcd(%q) = %v, want an error with %q", tc.list, err, tc.want)
		}
	}
}
