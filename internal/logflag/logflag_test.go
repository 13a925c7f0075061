package logflag

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func parse(t *testing.T, args ...string) *Flags {
	t.Helper()
	var f Flags
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &f
}

// JSON logs are one object a line, with the level and attributes as
// fields; the level filters.
func TestJSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := parse(t, "--log-format", "json", "--log-level", "warn").Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "journal", "a/b")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("log %q is not one JSON object: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" || rec["level"] != "WARN" || rec["journal"] != "a/b" {
		t.Errorf("log record %v", rec)
	}
}

func TestDefaultsAndEnvironment(t *testing.T) {
	var buf bytes.Buffer
	log, err := parse(t).Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("shown")
	if got := buf.String(); !strings.Contains(got, "level=INFO msg=shown") || strings.Contains(got, "hidden") {
		t.Errorf("the default logger wrote %q, want text at info", got)
	}
	t.Setenv("QUIRE_LOG_FORMAT", "json")
	if f := parse(t); f.Format != "json" {
		t.Errorf("QUIRE_LOG_FORMAT=json gives --log-format %q", f.Format)
	}
}

func TestBadValues(t *testing.T) {
	for _, args := range [][]string{{"--log-level", "loud"}, {"--log-format", "xml"}} {
		if _, err := parse(t, args...).Logger(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), args[1]) {
			t.Errorf("%v: error %v, want one naming %q", args, err, args[1])
		}
	}
}
