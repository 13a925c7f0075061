package recoverylog

import (
	"errors"
	"strings"
	"testing"
)

// fsmWith returns an FSM after: create node 1 at "a", write 3 bytes to
// it, create node 3 at "b".
func fsmWith(t *testing.T) *FSM {
	t.Helper()
	f := NewFSM(0)
	ops := []Op{
		{Kind: KindCreate, Seq: 1, Author: "r", Node: 1, Path: "a"},
		{Kind: KindWrite, Seq: 2, Author: "r", Node: 1, Offset: 0, Data: []byte("abc")},
		{Kind: KindCreate, Seq: 3, Author: "r", Node: 3, Path: "b"},
	}
	for i := range ops {
		if err := f.Apply(&ops[i], int64(i*10), int64(i*10+10)); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestFSMApplies(t *testing.T) {
	f := fsmWith(t)
	steps := []Op{
		{Kind: KindLink, Seq: 4, Author: "r", Node: 1, Path: "d/c"},
		{Kind: KindRename, Seq: 5, Author: "r", Path: "a", NewPath: "b"}, // Replaces node 3.
		{Kind: KindWrite, Seq: 6, Author: "s", Node: 1, Offset: 3, Data: []byte("de")},
		{Kind: KindUnlink, Seq: 7, Author: "s", Path: "b"},
	}
	for i := range steps {
		if err := f.Apply(&steps[i], 30+int64(i), 31+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := f.NodeOf(3); ok {
		t.Fatal("node 3 lives on after its only link was replaced")
	}
	n, ok := f.Lookup("d/c")
	if !ok || n.ID != 1 || n.Length != 5 || len(n.Links) != 1 || n.FirstOffset != 0 {
		t.Fatalf("d/c: %+v %v", n, ok)
	}
	if f.LastSeq != 7 || f.Author != "s" || f.Offset != 34 {
		t.Fatalf("state %d %q %d", f.LastSeq, f.Author, f.Offset)
	}
}

func TestFSMRejects(t *testing.T) {
	cases := []struct {
		op   Op
		want string
	}{
		{Op{Kind: KindUnlink, Seq: 3, Author: "r", Path: "a"}, "sequence number 3, expected 4"},
		{Op{Kind: KindUnlink, Seq: 9, Author: "r", Path: "a"}, "sequence number 9, expected 4"},
		{Op{Kind: KindCreate, Seq: 4, Author: "r", Node: 4, Path: "a"}, `path "a" already links node 1`},
		{Op{Kind: KindCreate, Seq: 4, Author: "r", Node: 2, Path: "n"}, "creates node 2, which must be its sequence number 4"},
		{Op{Kind: KindLink, Seq: 4, Author: "r", Node: 2, Path: "n"}, "node 2 does not exist"},
		{Op{Kind: KindLink, Seq: 4, Author: "r", Node: 1, Path: "b"}, `path "b" already links node 3`},
		{Op{Kind: KindUnlink, Seq: 4, Author: "r", Path: "zz"}, `path "zz" does not exist`},
		{Op{Kind: KindRename, Seq: 4, Author: "r", Path: "zz", NewPath: "a"}, `path "zz" does not exist`},
		{Op{Kind: KindWrite, Seq: 4, Author: "r", Node: 1, Offset: 2, Data: []byte("x")}, "write at offset 2 of node 1, whose length is 3"},
		{Op{Kind: KindWrite, Seq: 4, Author: "r", Node: 7, Offset: 0, Data: []byte("x")}, "node 7 does not exist"},
	}
	for _, c := range cases {
		f := fsmWith(t)
		err := f.Apply(&c.op, 1234, 1300)
		var oe *OpError
		if !errors.As(err, &oe) || !errors.Is(err, ErrOpRejected) || oe.Offset != 1234 {
			t.Errorf("%v: error %v, want an *OpError at offset 1234", &c.op, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "offset 1234") {
			t.Errorf("%v: error %q, want it to contain %q", &c.op, err, c.want)
		}
		if f.LastSeq != 3 || f.Offset != 30 || len(f.Paths()) != 2 {
			t.Errorf("%v: a rejected op changed the state", &c.op)
		}
	}
}
