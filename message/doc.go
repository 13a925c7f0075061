// Package message is Quire's message layer: it turns a journal's bytes into
// messages, and makes their processing exactly once.
//
// Journals hold bytes. Applications publish and consume messages: values
// of their own types, which implement Message, encoded in journals by a
// Framing. Each message carries a UUID, which tells who wrote it, in what
// order, and whether it is committed; from UUIDs, a reader can drop the
// duplicates that at-least-once appends may write, and hold back the
// messages of transactions that are not yet committed.
//
// # UUIDs
//
// A message's UUID is an RFC 4122 version 1 UUID, built by BuildUUID from
// three parts:
//
//   - The ProducerID, in the UUID's 48-bit node field: a random value (see
//     NewProducerID) chosen by each publisher when it starts, which tells
//     the producer of the message.
//   - The Clock, in the UUID's 60-bit timestamp field and the upper 4 bits
//     of its clock sequence field: the producer's logical clock, a
//     timestamp in 100ns ticks since 1582-10-15 and a 4-bit counter, which
//     orders the producer's messages.
//   - The Flags, in the lower 10 bits of the clock sequence field, which
//     tell how the message commits.
//
// A producer's Clock only moves forward: before building a UUID, the
// producer calls Clock.Update with the wall time, which moves the Clock to
// that time only if it is later, and then Clock.Tick, which advances the
// counter (carrying into the timestamp). So a producer's UUIDs have
// strictly increasing clocks, even within one 100ns tick and even when
// the wall clock steps back. Clocks compare as integers.
//
// # Exactly once
//
// A message is committed as follows, by its flags:
//
//   - OutsideTxn: the message commits on its own, as it is written.
//   - ContinueTxn: the message is part of a transaction of its producer,
//     and is uncommitted until the producer acknowledges it.
//   - AckTxn: the message is an acknowledgement (an otherwise empty
//     message, see Message.NewAcknowledgement): it commits the producer's
//     transaction, its ContinueTxn messages with clocks up to its own.
//
// A reader keeps, for each producer of a journal, the clock of the last
// message that it took. A message whose clock is not after that is a
// duplicate, or a replay of one, and is dropped. The sequencer of this
// package does this bookkeeping, and holds a producer's uncommitted
// messages until their acknowledgement arrives. A consumer stores these
// producer states along with its own state, in one transaction, so that a
// shard resumes exactly where its last commit left it.
//
// # Framings
//
// A Framing writes messages to a journal's bytes and splits those bytes
// back into frames, which it decodes. A journal holds messages of one
// framing; FramingByName returns the framing of a name, json or proto (a
// CSV framing needs its columns, so it is made by NewCSV rather than
// named):
//
//   - JSONLines ("json"): one message per line, as encoding/json encodes
//     and decodes it: the same bytes written (with SetEscapeHTML(false)),
//     the same values and errors read, the methods of json.Marshaler,
//     json.Unmarshaler and the encoding.Text interfaces called, names
//     matched case-insensitively, fields that a line lacks left as they
//     were. The work is done, about three times faster, by the engine of
//     json/v2 (github.com/go-json-experiment/json, which became Go's
//     encoding/json/v2) under encoding/json's options. encoding/json
//     itself takes over for types that json/v2 would treat otherwise
//     (fields of type encoding/json.Number, MarshalJSONTo or
//     UnmarshalJSONFrom methods, struct tag options that only json/v2
//     knows, such as embed or case:ignore), and for a line or a message
//     on which json/v2 fails, so that errors are encoding/json's; a type
//     one of whose lines encoding/json decodes where json/v2 failed (a
//     name that matches two fields case-insensitively, say) decodes with
//     encoding/json from then on. A flat struct (exported strings,
//     booleans, numbers and a UUID, plain names, no option but
//     omitempty) has a codec of its own, about twice as fast again, which
//     reads and writes only what it is sure encoding/json would read and
//     write the same way and leaves the rest to the path above. What
//     differs: when a line fails to
//     decode, the message may hold part of it, where encoding/json leaves
//     it untouched on a syntax error; and on a line that json/v2 fails
//     to decode, the UnmarshalJSON methods that it called before failing
//     are called again by encoding/json.
//     The UUID is a field of the application's type, by convention
//     UUID message.UUID `json:"uuid"`, which encodes as a JSON string.
//   - Protobuf ("proto"): length-prefixed protocol buffers. Each frame is
//     a 4-byte magic word (0xf1 'Q' 'F' and the framing's version, 1), the
//     message's length as a 4-byte little-endian integer, and the message.
//     Messages implement proto.Message as well as Message; the UUID is, by
//     convention, a field "bytes uuid = 1" of the application's message,
//     which GetUUID and SetUUID convert. Messages whose Go types
//     vtprotobuf's protoc-gen-go-vtproto also generated are encoded and
//     decoded by its methods, several times faster than protobuf's
//     reflection; see the Protobuf variable for how they differ.
//   - CSV ("csv", made by NewCSV with its columns): one message per
//     record of RFC 4180, whose fields are the declared columns, in
//     order. The UUID is in a named column ("uuid" by default), which
//     the framing fills from GetUUID and reads into SetUUID; the other
//     columns are the fields of the application's struct, by their tag
//     `csv:"name"` or their Go name. Fields are strings, bools, numbers,
//     UUIDs, encoding.Text types and pointers to these; an unquoted empty
//     cell is null (nil, or the zero value), "" is an empty string. A
//     record may span lines, where a quoted field holds newlines; it ends
//     with LF, or CRLF when read. A header (the columns' names, see
//     CSV.Header) and blank lines may stand anywhere in a journal, as a
//     reader may start anywhere: they are part of the frame of the record
//     that follows them, and Unmarshal skips them. An acknowledgement is
//     a record of its UUID alone.
//
// Unpack splits frames without decoding them and, for frames that fit in
// the bufio.Reader's buffer, without copying or allocating, so that a
// reader can skip frames cheaply; Unmarshal decodes a frame into a
// message. Malformed content is reported and skipped: a JSON line that is
// not valid JSON fails Unmarshal, and the next line reads as usual (so
// does a CSV record with bad quotes, the wrong number of fields or a cell
// that does not parse, and Unmarshal's error names the column); bytes
// that do not start a binary frame fail Unpack with ErrDesyncFrame, and
// Unpack resynchronizes at the next frame's magic word. No frame may
// exceed MaxFrameSize (64 MiB); a binary frame header with a larger
// length is rejected before anything is allocated for it.
package message
