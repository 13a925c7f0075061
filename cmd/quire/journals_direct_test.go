package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// awaitPersisted waits until journal's fragments are persisted up to at
// least end, as `journals fragments` lists them.
func awaitPersisted(t *testing.T, broker, journal string, end int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var listed struct {
			Fragments []struct {
				Begin, End int64
				ModTime    string
			}
		}
		out := must(t, broker, nil, "journals", "fragments", "-j", journal, "-o", "json").stdout
		if err := json.Unmarshal([]byte(out), &listed); err != nil {
			t.Fatalf("fragments -o json: %v\n%s", err, out)
		}
		var stored int64
		for _, f := range listed.Fragments {
			if f.ModTime != "" && f.Begin == stored {
				stored = f.End
			}
		}
		if stored >= end {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fragments of %s are persisted up to %d, want %d:\n%s", journal, stored, end, out)
		}
		time.Sleep(20 * time.Millisecond) // Polling the persister.
	}
}

// `journals read` reads persisted fragments from the store directly, and
// with --through-brokers through the broker, which then serves them: the
// same content either way.
func TestJournalsReadThroughBrokers(t *testing.T) {
	b := startBroker(t)
	must(t, b, strings.NewReader("journals: [{name: data/direct, replication: 1, fragment: {length: 1KiB, codec: gzip}}]\n"),
		"journals", "apply", "-f", "-")
	var content strings.Builder
	for i := range 4 {
		var chunk strings.Builder
		for n := 0; chunk.Len() < 2000; n++ {
			fmt.Fprintf(&chunk, "chunk %d line %d\n", i, n)
		}
		must(t, b, strings.NewReader(chunk.String()), "journals", "append", "-j", "data/direct")
		content.WriteString(chunk.String())
	}
	awaitPersisted(t, b, "data/direct", 4000)

	const directReads = "quire_broker_reads_direct_total"
	for _, args := range [][]string{
		{"journals", "read", "-j", "data/direct"},
		{"journals", "read", "-l", "name=data/direct"},
	} {
		before := counterValue(t, directReads)
		if got := must(t, b, nil, args...).stdout; got != content.String() {
			t.Errorf("%s: read %d bytes, which differ from the %d appended", strings.Join(args, " "), len(got), content.Len())
		}
		if counterValue(t, directReads) == before {
			t.Errorf("%s: the broker answered no direct read", strings.Join(args, " "))
		}
		args = append(args, "--through-brokers")
		before = counterValue(t, directReads)
		if got := must(t, b, nil, args...).stdout; got != content.String() {
			t.Errorf("%s: read %d bytes, which differ from the %d appended", strings.Join(args, " "), len(got), content.Len())
		}
		if d := counterValue(t, directReads) - before; d != 0 {
			t.Errorf("%s: the broker answered %v direct reads, want none", strings.Join(args, " "), d)
		}
	}
}
