package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/quire-dev/quire/message"
)

func newJournalsAttachUUIDsCommand() *cobra.Command {
	var field string
	cmd := &cobra.Command{
		Use:   "attach-uuids [--field uuid]",
		Short: "Give each JSON record of standard input a message UUID, so that consumers take it once however often it is appended",
		Long: `Read JSON records, one object a line, from standard input, and write each to
standard output with a message UUID in its top-level field --field ("uuid",
as applications conventionally name it; see docs/messages.md), replacing
any value there. The rest of each line is written as it was, byte for
byte. The UUIDs are of one new producer, with clocks that increase from
now, each committed on its own (not in a transaction).

Keep the output, and append it rather than the input: appending it again,
in whole or from any line on (after an append that failed partway, say),
appends duplicates that the consumers' sequencers drop, so that each
record is delivered once (as long as the consumers remember the producer:
their producer prune horizon, a day by default). Running attach-uuids
again makes new UUIDs: new messages.

  quire journals attach-uuids < orders.jsonl > orders.uuid.jsonl
  quire journals append orders/in --framing lines < orders.uuid.jsonl

A line that is not a JSON object stops the command with exit 1, naming
its number; the lines before it are written.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if field == "" || !utf8.ValidString(field) {
				return usagef("--field %q: give the name of the records' UUID field, in UTF-8", field)
			}
			return attachUUIDs(cmd.InOrStdin(), cmd.OutOrStdout(), field, message.NewProducerID(), message.NewClock(time.Now()))
		},
	}
	cmd.Flags().StringVar(&field, "field", "uuid", "the top-level JSON field that holds a record's UUID")
	return cmd
}

// attachUUIDs copies JSON lines from r to w, each with a UUID of producer
// p in field, their clocks ticking from c.
func attachUUIDs(r io.Reader, w io.Writer, field string, p message.ProducerID, c message.Clock) error {
	br, bw := bufio.NewReader(r), bufio.NewWriter(w)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return bw.Flush()
		} else if err != nil && !errors.Is(err, io.EOF) {
			return errors.Join(fmt.Errorf("reading standard input: %w", err), bw.Flush())
		}
		c.Tick()
		out, aerr := withUUID(bytes.TrimSuffix(line, []byte("\n")), field, message.BuildUUID(p, c, message.OutsideTxn))
		if aerr != nil {
			return errors.Join(fmt.Errorf("line %d: %w", n, aerr), bw.Flush())
		}
		bw.Write(out)
		if werr := bw.WriteByte('\n'); werr != nil {
			return fmt.Errorf("writing standard output: %w", werr)
		}
		if err != nil { // io.EOF, after a last line with no newline.
			return bw.Flush()
		}
	}
}

// withUUID returns record, a JSON object, with u as the value of its
// top-level field (every occurrence, or a new one first), and every other
// byte as it was.
func withUUID(record []byte, field string, u message.UUID) ([]byte, error) {
	if !utf8.ValidString(field) {
		return nil, fmt.Errorf("field name %q is not UTF-8", field) // Its key would not read back as it.
	}
	dec := json.NewDecoder(bytes.NewReader(record))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %s", shortRecord(record))
	}
	open := dec.InputOffset() // Just past '{'.
	empty := !dec.More()
	var spans [][2]int64 // of field's values
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		if key == field {
			end := dec.InputOffset()
			spans = append(spans, [2]int64{end - int64(len(value)), end})
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("content after the JSON object: %s", shortRecord(record))
	}
	text, _ := u.MarshalText() // Never fails.
	value := append(append([]byte{'"'}, text...), '"')
	if len(spans) == 0 {
		name, _ := json.Marshal(field) // A string always marshals.
		member := append(append(name, ':'), value...)
		if !empty {
			member = append(member, ',')
		}
		return append(append(append([]byte(nil), record[:open]...), member...), record[open:]...), nil
	}
	out := make([]byte, 0, len(record)+len(spans)*len(value))
	at := int64(0)
	for _, s := range spans {
		out = append(append(out, record[at:s[0]]...), value...)
		at = s[1]
	}
	return append(out, record[at:]...), nil
}

// shortRecord is the start of a record, for messages.
func shortRecord(record []byte) string {
	if len(record) > 40 {
		return fmt.Sprintf("%q…", record[:40])
	}
	return fmt.Sprintf("%q", record)
}
