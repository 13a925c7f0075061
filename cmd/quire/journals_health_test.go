package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quire-dev/quire/fragment"
)

// store-health through the command: a journal's store that cannot be
// written makes the report unhealthy (exit 1, the report on stdout, naming
// the step and the error); selecting only healthy stores exits 0; bad
// input exits 2 and prints nothing.
func TestJournalsStoreHealth(t *testing.T) {
	b := startBroker(t)
	blockedDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(blockedDir, fragment.ProbeDir), []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	blocked := "file://" + blockedDir + "/"
	spec := "journals:\n  - {name: health/ok, replication: 1, labels: {app: ok}}\n" +
		"  - {name: health/blocked, replication: 1, labels: {app: blocked}, fragment: {stores: [" + blocked + "]}}\n"
	must(t, b, strings.NewReader(spec), "journals", "apply", "-f", "-")

	r := quire(context.Background(), nil, "journals", "store-health", "-o", "json", "--broker", b)
	if r.err == nil || errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), "1 of 2 store checks failed") {
		t.Fatalf("store-health with a blocked store: %v, want an error (exit 1) saying 1 of 2 checks failed\nstdout: %s", r.err, r.stdout)
	}
	var report struct {
		Healthy bool `json:"healthy"`
		Brokers []struct {
			Broker string `json:"broker"`
			Stores []struct {
				URL, FailedStep, Error string
				Default                bool
				Journals               int
				OK                     bool
				Steps                  []struct{ Step, Latency string }
			} `json:"stores"`
		} `json:"brokers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &report); err != nil {
		t.Fatalf("-o json printed %q: %v", r.stdout, err)
	}
	if report.Healthy || len(report.Brokers) != 1 || report.Brokers[0].Broker != "z#b1" || len(report.Brokers[0].Stores) != 2 {
		t.Fatalf("report %+v, want one broker z#b1 with two stores, unhealthy", report)
	}
	for _, st := range report.Brokers[0].Stores {
		switch {
		case st.URL == blocked:
			if st.OK || st.FailedStep != "write" || !strings.Contains(st.Error, "not a directory") || st.Journals != 1 || st.Default {
				t.Errorf("blocked store: %+v, want a failed write (not a directory) used by 1 journal", st)
			}
		case st.Default:
			if !st.OK || len(st.Steps) != 4 || st.Steps[3].Step != "delete" || st.Steps[0].Latency == "" || st.Journals != 1 {
				t.Errorf("default store: %+v, want ok after write, read, list, delete, used by 1 journal", st)
			}
		default:
			t.Errorf("unexpected store %+v", st)
		}
	}

	ok := must(t, b, nil, "journals", "store-health", "-l", "app=ok")
	lines := strings.Split(strings.TrimSpace(ok.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "BROKER") || !strings.Contains(lines[1], " * ") ||
		!strings.Contains(lines[1], " ok ") || !strings.Contains(lines[1], "delete ") {
		t.Errorf("store-health -l app=ok printed:\n%s\nwant a header and the default store, ok", ok.stdout)
	}
	if y := must(t, b, nil, "journals", "store-health", "-l", "app=ok", "-o", "yaml").stdout; !strings.Contains(y, "healthy: true") {
		t.Errorf("-o yaml printed:\n%s", y)
	}

	for _, args := range [][]string{
		{"--store", "ftp://nowhere/"},
		{"-l", "app=="},
		{"-o", "xml"},
		{"extra"},
	} {
		r := quire(context.Background(), nil, append([]string{"journals", "store-health", "--broker", b}, args...)...)
		if !errors.As(r.err, new(usageError)) || r.stdout != "" {
			t.Errorf("store-health %q: %v, stdout %q; want a usage error (exit 2) and no output", args, r.err, r.stdout)
		}
	}
}
