package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/message"
)

func TestWithUUID(t *testing.T) {
	u := message.BuildUUID(message.ProducerID{1, 2, 3, 4, 5, 6}, message.NewClock(time.Unix(1e9, 0)), message.OutsideTxn)
	q := `"` + u.String() + `"`
	for _, tc := range []struct{ in, field, want string }{
		{`{"word":"a"}`, "uuid", `{"uuid":` + q + `,"word":"a"}`},
		{`{}`, "uuid", `{"uuid":` + q + `}`},
		{` { } `, "uuid", ` {"uuid":` + q + ` } `},
		{`{"uuid":"old","n":1.50,"uuid":{"x":[1]}}`, "uuid", `{"uuid":` + q + `,"n":1.50,"uuid":` + q + `}`},
		{`{"u\u0075id" : null}`, "uuid", `{"u\u0075id" : ` + q + `}`},
		{`{"a":{"uuid":1}}`, "uuid", `{"uuid":` + q + `,"a":{"uuid":1}}`},
		{`{"a":1}`, `_meta/"id"`, `{"_meta/\"id\"":` + q + `,"a":1}`},
	} {
		got, err := withUUID([]byte(tc.in), tc.field, u)
		if err != nil || string(got) != tc.want {
			t.Errorf("withUUID(%s, %q) = %s, %v; want %s", tc.in, tc.field, got, err, tc.want)
		}
	}
	for _, in := range []string{``, `[1]`, `"s"`, `{"a":}`, `{"a":1}{}`, `{"a":1`, `null`} {
		if got, err := withUUID([]byte(in), "uuid", u); err == nil {
			t.Errorf("withUUID(%s) = %s, want an error", in, got)
		}
	}
}

// FuzzWithUUID checks, for any line, that withUUID takes exactly the JSON
// objects, and makes of each one whose field decodes as the UUID while
// every other member stays as it was.
func FuzzWithUUID(f *testing.F) {
	for _, s := range []string{`{"word":"a"}`, `{}`, `{"uuid":1,"uuid":2}`, ` {"a" : [1, {"uuid":3}]} `, `[1]`, `{"a":1}x`, "{\"\xff\":1}"} {
		f.Add([]byte(s), "uuid")
	}
	u := message.BuildUUID(message.ProducerID{9}, message.NewClock(time.Unix(2e9, 0)), message.OutsideTxn)
	f.Fuzz(func(t *testing.T, in []byte, field string) {
		out, err := withUUID(in, field, u)
		trimmed := bytes.TrimLeft(in, " \t\r\n")
		isObject := json.Valid(in) && len(trimmed) > 0 && trimmed[0] == '{' && utf8.ValidString(field)
		if err != nil {
			if isObject {
				t.Fatalf("withUUID(%q, %q) refused a JSON object: %v", in, field, err)
			}
			return
		}
		if !isObject {
			t.Fatalf("withUUID(%q) took what is not a JSON object: %q", in, out)
		}
		var before, after map[string]json.RawMessage
		if err := json.Unmarshal(in, &before); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("withUUID(%q) = %q, not JSON: %v", in, out, err)
		}
		var got message.UUID
		if err := json.Unmarshal(after[field], &got); err != nil || got != u {
			t.Fatalf("withUUID(%q) = %q: field %q holds %s (%v), want %s", in, out, field, after[field], err, u)
		}
		delete(before, field)
		delete(after, field)
		if len(before) != len(after) {
			t.Fatalf("withUUID(%q) = %q: members changed", in, out)
		}
		for k, v := range before {
			if !bytes.Equal(after[k], v) {
				t.Fatalf("withUUID(%q) = %q: member %q changed from %s to %s", in, out, k, v, after[k])
			}
		}
	})
}

// Records given UUIDs once, then appended more than once (whole, and
// again from a line on, as after an append that failed partway), are
// each delivered once; lines that are not JSON objects stop the command.
func TestJournalsAttachUUIDs(t *testing.T) {
	b := startBroker(t)
	must(t, b, strings.NewReader("journals: [{name: in/words, replication: 1}]\n"), "journals", "apply", "-f", "-")
	r := must(t, b, strings.NewReader("{\"word\":\"a\"}\n{\"word\":\"b\",\"uuid\":null}\n{\"word\":\"c\"}"), "journals", "attach-uuids")
	lines := strings.SplitAfter(r.stdout, "\n")
	if len(lines) != 4 || lines[3] != "" {
		t.Fatalf("attach-uuids wrote %q, want 3 lines", r.stdout)
	}
	must(t, b, strings.NewReader(r.stdout), "journals", "append", "in/words", "--framing", "lines")
	must(t, b, strings.NewReader(lines[1]+lines[2]), "journals", "append", "in/words", "--framing", "lines")
	must(t, b, strings.NewReader(r.stdout), "journals", "append", "in/words", "--framing", "lines")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Broker: b})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mr, err := message.NewReader(ctx, c, message.ReaderConfig{Journal: "in/words", New: func() message.Message { return &wordcount.Word{} }})
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for {
		d, err := mr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		words = append(words, d.Message.(*wordcount.Word).Word)
	}
	if strings.Join(words, " ") != "a b c" {
		t.Errorf("delivered %q from 3 records appended 8 times in all, want each once", words)
	}

	for _, in := range []string{"{\"word\":\"a\"}\nnot json\n{\"word\":\"c\"}\n", "{\"word\":\"a\"}\n\n"} {
		r := quire(context.Background(), strings.NewReader(in), "journals", "attach-uuids")
		if r.err == nil || !strings.Contains(r.err.Error(), "line 2: not a JSON object") || strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("attach-uuids of %q: %v, wrote %q; want line 1 written and line 2 refused", in, r.err, r.stdout)
		}
	}
	if r := quire(context.Background(), nil, "journals", "attach-uuids", "--field", ""); !errors.As(r.err, new(usageError)) {
		t.Errorf("--field '': %v, want a usage error", r.err)
	}
}
