package recoverylog

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func sampleOps() []Op {
	return []Op{
		{Kind: KindCreate, Seq: 1, Author: "a", Node: 1, Path: "000001.log"},
		{Kind: KindWrite, Seq: 2, Author: "a", Node: 1, Offset: 0, Data: []byte("hello")},
		{Kind: KindWrite, Seq: 3, Author: "a", Node: 1, Offset: 5, Data: bytes.Repeat([]byte{7}, 70000)},
		{Kind: KindLink, Seq: 4, Author: "a", Node: 1, Path: "dir/other"},
		{Kind: KindRename, Seq: 5, Author: "a", Path: "000001.log", NewPath: "MANIFEST-000001"},
		{Kind: KindUnlink, Seq: 6, Author: "shard-7/host:1", Path: "dir/other"},
		{Kind: KindWriteAt, Seq: 7, Author: "a", Node: 1, Offset: 2, Data: []byte("LL")},
		{Kind: KindTruncate, Seq: 8, Author: "a", Node: 1, Offset: 3},
	}
}

func TestOpRoundTrip(t *testing.T) {
	var log []byte
	ops := sampleOps()
	for i := range ops {
		log = AppendOp(log, &ops[i])
	}
	b := log
	for i := range ops {
		op, n, err := DecodeOp(b)
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if !reflect.DeepEqual(op, ops[i]) {
			t.Fatalf("op %d: decoded %v, want %v", i, &op, &ops[i])
		}
		b = b[n:]
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left", len(b))
	}
	// The stream reader sees the same ops, and EOF at the end.
	r := &opReader{r: bytes.NewReader(log)}
	for i := range ops {
		op, err := r.next()
		if err != nil || op.Seq != ops[i].Seq {
			t.Fatalf("reader op %d: %v %v", i, &op, err)
		}
	}
	if _, err := r.next(); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	if r.offset != int64(len(log)) {
		t.Fatalf("reader offset %d, want %d", r.offset, len(log))
	}
}

func TestDecodeOpRejects(t *testing.T) {
	good := AppendOp(nil, &Op{Kind: KindCreate, Seq: 1, Author: "a", Node: 1, Path: "x"})
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:5], "unexpected EOF"},
		{"cut body", good[:len(good)-1], "unexpected EOF"},
		{"magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b }), "bad magic"},
		{"version", mutate(func(b []byte) []byte { b[2] = 9; return b }), "frame version 9"},
		{"checksum", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "checksum"},
		{"huge", mutate(func(b []byte) []byte { b[6] = 0xff; return b }), "body length"},
		{"escaping path", AppendOp(nil, &Op{Kind: KindCreate, Seq: 1, Author: "a", Node: 1, Path: "../x"}), "not a clean relative path"},
		{"absolute path", AppendOp(nil, &Op{Kind: KindLink, Seq: 1, Author: "a", Node: 1, Path: "/etc/x"}), "not a clean relative path"},
		{"kind", AppendOp(nil, &Op{Kind: 99, Seq: 1, Author: "a"}), "unknown op kind 99"},
		{"seq 0", AppendOp(nil, &Op{Kind: KindUnlink, Author: "a", Path: "x"}), "sequence number 0"},
		{"no author", AppendOp(nil, &Op{Kind: KindUnlink, Seq: 1, Path: "x"}), "author"},
		{"empty write", AppendOp(nil, &Op{Kind: KindWrite, Seq: 1, Author: "a", Node: 1}), "write of no data"},
	}
	for _, c := range cases {
		_, _, err := DecodeOp(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
		if err != nil && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: error %v does not wrap ErrCorrupt", c.name, err)
		}
	}
}

func FuzzDecodeOp(f *testing.F) {
	ops := sampleOps()
	for i := range ops {
		f.Add(AppendOp(nil, &ops[i]))
	}
	f.Add([]byte("QL\x01\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		op, n, err := DecodeOp(b)
		if err != nil {
			return
		}
		if n > len(b) {
			t.Fatalf("frame length %d beyond the input's %d", n, len(b))
		}
		if again := AppendOp(nil, &op); !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding %v gives %x, not the input %x", &op, again, b[:n])
		}
	})
}

// TestDecodeOpMutations runs the fuzz property over many random mutations
// of valid frames, without the fuzzing engine.
func TestDecodeOpMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	ops := sampleOps()
	for i := range 200000 {
		b := AppendOp(nil, &ops[i%len(ops)])
		for range 1 + rng.IntN(4) {
			switch rng.IntN(3) {
			case 0:
				b[rng.IntN(len(b))] = byte(rng.Uint32())
			case 1:
				b = b[:rng.IntN(len(b)+1)]
			default:
				b = append(b, byte(rng.Uint32()))
			}
			if len(b) == 0 {
				break
			}
		}
		if op, n, err := DecodeOp(b); err == nil {
			if again := AppendOp(nil, &op); !bytes.Equal(again, b[:n]) {
				t.Fatalf("re-encoding %v differs from the input", &op)
			}
		}
	}
}
