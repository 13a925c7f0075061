package recoverylog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path"
	"strings"
	"unicode/utf8"
)

// Kind is the kind of a file operation.
type Kind uint8

// The kinds of operations. Their values are part of the log format.
const (
	// KindCreate creates a new, empty node linked at Path. Its Node is
	// its own sequence number.
	KindCreate Kind = 1
	// KindLink adds Path as a link to the existing Node.
	KindLink Kind = 2
	// KindUnlink removes the link Path; a node without links is gone.
	KindUnlink Kind = 3
	// KindRename moves the link Path to NewPath, replacing any link at
	// NewPath (as rename(2) does).
	KindRename Kind = 4
	// KindWrite appends Data to Node at Offset, which must be the node's
	// length.
	KindWrite Kind = 5
	// KindWriteAt writes Data to Node at any Offset: over its content,
	// or past its end, which grows the node to Offset+len(Data) (bytes
	// between the old end and Offset read as zeros). Files that are
	// written in place, as SQLite's are, record these.
	KindWriteAt Kind = 6
	// KindTruncate sets Node's length to Offset, cutting its content or
	// growing it with zeros, as ftruncate(2) does.
	KindTruncate Kind = 7
)

// changesContent tells whether ops of kind k change a node's content.
func (k Kind) changesContent() bool {
	return k == KindWrite || k == KindWriteAt || k == KindTruncate
}

func (k Kind) String() string {
	switch k {
	case KindCreate:
		return "create"
	case KindLink:
		return "link"
	case KindUnlink:
		return "unlink"
	case KindRename:
		return "rename"
	case KindWrite:
		return "write"
	case KindWriteAt:
		return "write-at"
	case KindTruncate:
		return "truncate"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Op is one recorded file operation.
type Op struct {
	Kind   Kind
	Seq    uint64 // 1 for the first op of a log, then each op's is the previous one's plus 1.
	Author string // ID of the recorder that wrote it.

	Node    uint64 // Create, Link, Write, WriteAt, Truncate.
	Path    string // Create, Link, Unlink, Rename (its source).
	NewPath string // Rename.
	Offset  int64  // Write, WriteAt; Truncate: the new length.
	Data    []byte // Write, WriteAt; decoded ops alias the decoder's buffer.
}

func (op *Op) String() string {
	head := fmt.Sprintf("%s #%d by %q", op.Kind, op.Seq, op.Author)
	switch op.Kind {
	case KindCreate, KindLink:
		return fmt.Sprintf("%s: node %d at %q", head, op.Node, op.Path)
	case KindUnlink:
		return fmt.Sprintf("%s: %q", head, op.Path)
	case KindRename:
		return fmt.Sprintf("%s: %q to %q", head, op.Path, op.NewPath)
	case KindWrite, KindWriteAt:
		return fmt.Sprintf("%s: node %d, %d bytes at %d", head, op.Node, len(op.Data), op.Offset)
	case KindTruncate:
		return fmt.Sprintf("%s: node %d to %d bytes", head, op.Node, op.Offset)
	}
	return head
}

// The frame of an op is a header and a body:
//
//	magic   2 bytes  "QL"
//	version 1 byte   1, or 2 for the kinds write-at and truncate
//	length  4 bytes  little-endian length of the body
//	crc     4 bytes  little-endian CRC-32C (Castagnoli) of the body
//	body    kind (1 byte), seq (uvarint), author (string), then by kind:
//	        create, link:    node (uvarint), path (string)
//	        unlink:          path (string)
//	        rename:          path (string), new path (string)
//	        write, write-at: node (uvarint), offset (uvarint), data (the rest)
//	        truncate:        node (uvarint), length (uvarint)
//
// A string is a uvarint length and that many bytes of UTF-8.
//
// Version 2 came with the kinds write-at and truncate, and only their
// frames carry it: logs of appending writes (Pebble's, JSONFile's) stay
// version 1, readable by players that know version 1 only, and such a
// player stops at the first op it cannot apply with an error naming the
// version, rather than misreading it.
const (
	frameVersion = 2 // The newest version this package reads and writes.
	headerLen    = 11
	// MaxBodyLen bounds an op's body; the recorder splits larger writes.
	MaxBodyLen = 16 << 20
	// maxWriteData is the most data the recorder puts in one write op.
	maxWriteData = 4 << 20
	maxPathLen   = 4096
	maxAuthorLen = 1024
	// maxFileLen bounds a file's length, and so every offset of an op.
	maxFileLen = 1 << 62
)

var frameMagic = [2]byte{'Q', 'L'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by errors decoding a frame that is not a valid op.
var ErrCorrupt = errors.New("corrupt recovery log op")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// AppendOp appends the frame of op to b. It does not validate op (see
// Op.validate).
func AppendOp(b []byte, op *Op) []byte {
	start := len(b)
	b = append(b, frameMagic[0], frameMagic[1], versionOf(op.Kind), 0, 0, 0, 0, 0, 0, 0, 0)
	body := len(b)
	b = append(b, byte(op.Kind))
	b = binary.AppendUvarint(b, op.Seq)
	b = appendString(b, op.Author)
	switch op.Kind {
	case KindCreate, KindLink:
		b = binary.AppendUvarint(b, op.Node)
		b = appendString(b, op.Path)
	case KindUnlink:
		b = appendString(b, op.Path)
	case KindRename:
		b = appendString(b, op.Path)
		b = appendString(b, op.NewPath)
	case KindWrite, KindWriteAt:
		b = binary.AppendUvarint(b, op.Node)
		b = binary.AppendUvarint(b, uint64(op.Offset))
		b = append(b, op.Data...)
	case KindTruncate:
		b = binary.AppendUvarint(b, op.Node)
		b = binary.AppendUvarint(b, uint64(op.Offset))
	}
	binary.LittleEndian.PutUint32(b[start+3:], uint32(len(b)-body))
	binary.LittleEndian.PutUint32(b[start+7:], crc32.Checksum(b[body:], castagnoli))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// versionOf is the frame version of the ops of kind k.
func versionOf(k Kind) byte {
	if k == KindWriteAt || k == KindTruncate {
		return 2
	}
	return 1
}

// header is a parsed frame header.
type header struct {
	version byte
	length  int    // Of the body.
	sum     uint32 // The body's CRC-32C.
}

// parseHeader validates a frame header.
func parseHeader(h []byte) (header, error) {
	if h[0] != frameMagic[0] || h[1] != frameMagic[1] {
		return header{}, corrupt("bad magic %#x%02x, not an op frame", h[0], h[1])
	}
	if h[2] == 0 || h[2] > frameVersion {
		return header{}, corrupt("frame version %d, this reader knows versions 1 to %d", h[2], frameVersion)
	}
	n := binary.LittleEndian.Uint32(h[3:])
	if n == 0 || n > MaxBodyLen {
		return header{}, corrupt("body length %d is not in [1, %d]", n, MaxBodyLen)
	}
	return header{version: h[2], length: int(n), sum: binary.LittleEndian.Uint32(h[7:])}, nil
}

// DecodeOp decodes the frame at the start of b, returning the op and the
// frame's length. It returns io.ErrUnexpectedEOF if b holds only part of
// a frame, and an error wrapping ErrCorrupt if the frame is not valid.
// The op's Data aliases b.
func DecodeOp(b []byte) (Op, int, error) {
	if len(b) < headerLen {
		return Op{}, 0, io.ErrUnexpectedEOF
	}
	h, err := parseHeader(b[:headerLen])
	if err != nil {
		return Op{}, 0, err
	}
	if len(b) < headerLen+h.length {
		return Op{}, 0, io.ErrUnexpectedEOF
	}
	op, err := decodeBody(b[headerLen:headerLen+h.length], h)
	return op, headerLen + h.length, err
}

func decodeBody(body []byte, h header) (Op, error) {
	if got := crc32.Checksum(body, castagnoli); got != h.sum {
		return Op{}, corrupt("checksum %#08x of the body, header says %#08x", got, h.sum)
	}
	d := decoder{b: body}
	op := Op{Kind: Kind(d.byte())}
	op.Seq = d.uvarint("sequence number")
	op.Author = d.string("author", maxAuthorLen)
	switch op.Kind {
	case KindCreate, KindLink:
		op.Node = d.uvarint("node")
		op.Path = d.string("path", maxPathLen)
	case KindUnlink:
		op.Path = d.string("path", maxPathLen)
	case KindRename:
		op.Path = d.string("path", maxPathLen)
		op.NewPath = d.string("new path", maxPathLen)
	case KindWrite, KindWriteAt, KindTruncate:
		op.Node = d.uvarint("node")
		off := d.uvarint("offset")
		if off > maxFileLen && d.err == nil {
			d.err = corrupt("%s offset %d is too large", op.Kind, off)
		}
		op.Offset = int64(off)
		if op.Kind != KindTruncate {
			op.Data = d.rest()
		}
	default:
		return Op{}, corrupt("unknown op kind %d", uint8(op.Kind))
	}
	if v := versionOf(op.Kind); h.version != v && d.err == nil {
		return Op{}, corrupt("a %s op in a frame of version %d, not %d", op.Kind, h.version, v)
	}
	if d.err != nil {
		return Op{}, d.err
	}
	if len(d.b) != 0 {
		return Op{}, corrupt("%d unexpected bytes after the %s op", len(d.b), op.Kind)
	}
	if err := op.validate(); err != nil {
		return Op{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return op, nil
}

// validate checks the fields of op on their own (not against a state).
func (op *Op) validate() error {
	if op.Seq == 0 {
		return errors.New("sequence number 0")
	}
	if err := validAuthor(op.Author); err != nil {
		return err
	}
	switch op.Kind {
	case KindCreate, KindLink, KindUnlink:
		return validPath(op.Path)
	case KindRename:
		if err := validPath(op.Path); err != nil {
			return err
		}
		return validPath(op.NewPath)
	case KindWrite, KindWriteAt:
		switch {
		case len(op.Data) == 0:
			return errors.New("write of no data")
		case op.Offset < 0 || op.Offset > maxFileLen-int64(len(op.Data)):
			return fmt.Errorf("write of %d bytes at offset %d, not within [0, %d]", len(op.Data), op.Offset, int64(maxFileLen))
		}
		return nil
	case KindTruncate:
		if op.Offset < 0 || op.Offset > maxFileLen {
			return fmt.Errorf("truncate to length %d, not within [0, %d]", op.Offset, int64(maxFileLen))
		}
		return nil
	}
	return fmt.Errorf("unknown op kind %d", uint8(op.Kind))
}

// validPath accepts relative, clean, slash-separated paths that stay
// within the recorded directory.
func validPath(p string) error {
	switch {
	case p == "" || len(p) > maxPathLen:
		return fmt.Errorf("path of %d bytes, not 1 to %d", len(p), maxPathLen)
	case !utf8.ValidString(p) || strings.ContainsRune(p, 0) || strings.ContainsRune(p, '\\'):
		return fmt.Errorf("path %q has invalid characters", p)
	case path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("path %q is not a clean relative path within the directory", p)
	}
	return nil
}

func validAuthor(a string) error {
	if a == "" || len(a) > maxAuthorLen || !utf8.ValidString(a) {
		return fmt.Errorf("author %q is not 1 to %d bytes of UTF-8", a, maxAuthorLen)
	}
	return nil
}

// decoder reads fields of a body, keeping the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("kind")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string(what string, limit int) string {
	n := d.uvarint(what + " length")
	if d.err != nil {
		return ""
	}
	if n > uint64(limit) || n > uint64(len(d.b)) {
		d.err = corrupt("%s length %d exceeds %d or the %d bytes left", what, n, limit, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) rest() []byte {
	b := d.b
	d.b = nil
	return b
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = corrupt("body ends in or lacks its %s", what)
	}
}

// opReader reads frames from a stream, tracking the log offset.
type opReader struct {
	r      io.Reader
	offset int64 // Log offset of the next frame.
	header [headerLen]byte
	body   []byte
}

// next reads the next op. It returns io.EOF at a frame boundary, and
// io.ErrUnexpectedEOF within a frame. The op's Data is valid until the
// next call.
func (r *opReader) next() (Op, error) {
	if _, err := io.ReadFull(r.r, r.header[:]); err != nil {
		return Op{}, err
	}
	h, err := parseHeader(r.header[:])
	if err != nil {
		return Op{}, err
	}
	n := h.length
	if cap(r.body) < n {
		r.body = make([]byte, n)
	}
	r.body = r.body[:n]
	if _, err := io.ReadFull(r.r, r.body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Op{}, err
	}
	op, err := decodeBody(r.body, h)
	if err != nil {
		return Op{}, err
	}
	r.offset += int64(headerLen + n)
	return op, nil
}
