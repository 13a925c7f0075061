package keyspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/internal/etcdtest"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// waitTimeout bounds every wait of a test; nothing should take this long.
const waitTimeout = 60 * time.Second

// decodeInt decodes values that are decimal integers.
func decodeInt(kv *mvccpb.KeyValue) (any, error) { return strconv.Atoi(string(kv.Value)) }

// render shows kvs as "key=decoded ..." with root trimmed from the keys, or
// flags it if kvs is not sorted and unique or holds a key outside root.
func render(root string, kvs KeyValues) string {
	var parts []string
	prev := ""
	for kv := range kvs.All() {
		key := string(kv.Raw.Key)
		if len(parts) > 0 && prev >= key {
			return "UNSORTED"
		}
		prev = key
		if !strings.HasPrefix(key, root) {
			return "OUTSIDE ROOT: " + key
		}
		parts = append(parts, fmt.Sprintf("%s=%v", strings.TrimPrefix(key, root), kv.Decoded))
	}
	return strings.Join(parts, " ")
}

// checkSnapshot fails the test unless the mirror renders as want at a
// revision of at least rev.
func checkSnapshot(t *testing.T, ks *KeySpace, rev int64, want string) KeyValues {
	t.Helper()
	kvs, got := ks.Snapshot()
	if got < rev {
		t.Errorf("snapshot revision %d, want at least %d", got, rev)
	}
	if s := render(ks.Root, kvs); s != want {
		t.Errorf("snapshot at revision %d is %q, want %q", got, s, want)
	}
	return kvs
}

// startWatch runs ks.Watch until the test ends, then checks it returned the
// context's error.
func startWatch(t *testing.T, ks *KeySpace, c *clientv3.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ks.Watch(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	})
}

func waitRev(t *testing.T, ks *KeySpace, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := ks.WaitForRevision(ctx, rev); err != nil {
		t.Fatalf("waiting for revision %d (mirror at %d): %v", rev, ks.Revision(), err)
	}
}

// txn applies ops in one etcd transaction and returns its revision.
func txn(t *testing.T, c *clientv3.Client, ops ...clientv3.Op) int64 {
	t.Helper()
	resp, err := c.Txn(context.Background()).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func put(t *testing.T, c *clientv3.Client, key, value string) int64 {
	t.Helper()
	return txn(t, c, clientv3.OpPut(key, value))
}

func load(t *testing.T, ks *KeySpace, c *clientv3.Client, rev int64) {
	t.Helper()
	if err := ks.Load(context.Background(), c, rev); err != nil {
		t.Fatal(err)
	}
}

// lockedBuffer is a bytes.Buffer safe for a logging goroutine and a test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// captureLog sends ks's log to the returned buffer.
func captureLog(ks *KeySpace) *lockedBuffer {
	buf := &lockedBuffer{}
	ks.log = slog.New(slog.NewTextHandler(buf, nil))
	return buf
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// startServer starts a dedicated etcd server and a client of it, both
// closed when the test ends.
func startServer(t *testing.T) (*etcdtest.Server, *clientv3.Client) {
	t.Helper()
	s, err := etcdtest.Start(t.TempDir(), etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, c
}

func TestLoadAndWatch(t *testing.T) {
	c, p := etcdtest.Client(t)
	root := p + "in/"
	put(t, c, root+"a", "1")
	created := put(t, c, root+"b", "2")
	// Neighbours of the root, on both sides, must never enter.
	put(t, c, p+"in", "9")
	put(t, c, p+"im/x", "9")
	last := put(t, c, p+"in0", "9")

	ks := New(root, decodeInt)
	load(t, ks, c, 0)
	type kept struct {
		kvs  KeyValues
		want string
	}
	snaps := []kept{{checkSnapshot(t, ks, last, "a=1 b=2"), "a=1 b=2"}}
	startWatch(t, ks, c)

	steps := []struct {
		name string
		ops  []clientv3.Op
		want string
	}{
		{"put a new key", []clientv3.Op{clientv3.OpPut(root+"c", "3")}, "a=1 b=2 c=3"},
		{"put, update and delete in one transaction", []clientv3.Op{
			clientv3.OpPut(root+"d", "4"), clientv3.OpPut(root+"b", "20"), clientv3.OpDelete(root + "a"),
		}, "b=20 c=3 d=4"},
		{"keys outside the root in the same transaction", []clientv3.Op{
			clientv3.OpPut(p+"in", "8"), clientv3.OpPut(root+"e", "5"), clientv3.OpPut(p+"in0", "8"),
			clientv3.OpPut(p+"im/y", "8"), clientv3.OpPut(p+"out/e", "8"),
		}, "b=20 c=3 d=4 e=5"},
		{"delete a range", []clientv3.Op{clientv3.OpDelete(root+"c", clientv3.WithRange(root+"e"))}, "b=20 e=5"},
		{"insert before, between and after", []clientv3.Op{
			clientv3.OpPut(root+"0", "0"), clientv3.OpPut(root+"c", "6"), clientv3.OpPut(root+"z", "7"),
		}, "0=0 b=20 c=6 e=5 z=7"},
		{"delete everything", []clientv3.Op{clientv3.OpDelete(root, clientv3.WithPrefix())}, ""},
		{"recreate a deleted key", []clientv3.Op{clientv3.OpPut(root+"b", "21")}, "b=21"},
	}
	for _, st := range steps {
		rev := txn(t, c, st.ops...)
		waitRev(t, ks, rev)
		snaps = append(snaps, kept{checkSnapshot(t, ks, rev, st.want), st.want})
		if t.Failed() {
			t.Fatalf("after step %q", st.name)
		}
	}

	// The last step recreated b: a new create revision and version 1.
	kvs, _ := ks.Snapshot()
	b, _ := kvs.Get(root + "b")
	if raw := b.Raw; raw.CreateRevision <= created || raw.Version != 1 || raw.ModRevision != raw.CreateRevision {
		t.Errorf("recreated key has create %d, mod %d, version %d", raw.CreateRevision, raw.ModRevision, raw.Version)
	}
	// Copy-on-write: every snapshot still reads as it did.
	for i, s := range snaps {
		if got := render(root, s.kvs); got != s.want {
			t.Errorf("snapshot %d changed to %q, want %q", i, got, s.want)
		}
	}
}

func TestUpdatesApplyInOrder(t *testing.T) {
	c, root := etcdtest.Client(t)
	ks := New(root, decodeInt)
	load(t, ks, c, 0)
	startWatch(t, ks, c)

	var rev int64
	for i := range 50 {
		rev = put(t, c, root+"k", strconv.Itoa(i))
		if i%7 == 0 {
			txn(t, c, clientv3.OpDelete(root+"k"))
			rev = put(t, c, root+"k", strconv.Itoa(i))
		}
	}
	waitRev(t, ks, rev)
	kvs := checkSnapshot(t, ks, rev, "k=49")
	if k, ok := kvs.Get(root + "k"); ok && k.Raw.ModRevision != rev {
		t.Errorf("mod revision %d, want %d", k.Raw.ModRevision, rev)
	}
}

func TestWatchLoadsWhenNotLoaded(t *testing.T) {
	c, root := etcdtest.Client(t)
	rev := put(t, c, root+"a", "1")
	ks := New(root, decodeInt)
	startWatch(t, ks, c)
	waitRev(t, ks, rev)
	checkSnapshot(t, ks, rev, "a=1")
}

func TestDecodeFailure(t *testing.T) {
	c, root := etcdtest.Client(t)
	put(t, c, root+"bad", "x")
	put(t, c, root+"good", "1")

	ks := New(root, decodeInt)
	logs := captureLog(ks)
	errs := counterValue(t, decodeErrors)
	load(t, ks, c, 0)
	checkSnapshot(t, ks, 0, "good=1")
	if log := logs.String(); !strings.Contains(log, "key="+root+"bad") || !strings.Contains(log, `parsing \"x\"`) {
		t.Errorf("log of Load lacks the key or the error:\n%s", log)
	}
	startWatch(t, ks, c)

	steps := []struct {
		name, value, want string
		bad               bool
	}{
		{"a bad value is kept out", "y", "good=1", true},
		{"fixing it brings it in", "7", "good=1 k=7", false},
		{"breaking a good key removes it", "z", "good=1", true},
		{"fixing it again", "8", "good=1 k=8", false},
	}
	errs++
	for _, st := range steps {
		rev := put(t, c, root+"k", st.value)
		waitRev(t, ks, rev)
		checkSnapshot(t, ks, rev, st.want)
		if st.bad {
			errs++
			want := fmt.Sprintf(`parsing \"%s\"`, st.value)
			if log := logs.String(); !strings.Contains(log, "key="+root+"k") || !strings.Contains(log, want) {
				t.Errorf("%s: log lacks the key or %s:\n%s", st.name, want, log)
			}
		}
		if got := counterValue(t, decodeErrors); got != errs {
			t.Errorf("%s: %v decode errors counted, want %v", st.name, got, errs)
		}
	}
}

func TestWaitForRevision(t *testing.T) {
	c, root := etcdtest.Client(t)
	ks := New(root, decodeInt)
	load(t, ks, c, 0)
	startWatch(t, ks, c)

	rev := put(t, c, root+"a", "1")
	waitRev(t, ks, rev)
	if got := ks.Revision(); got < rev {
		t.Fatalf("Revision() = %d after waiting for %d", got, rev)
	}

	// A waiter for the next revision returns once a write makes it.
	next := ks.Revision() + 1
	done := make(chan error, 1)
	go func() { done <- ks.WaitForRevision(context.Background(), next) }()
	select {
	case err := <-done:
		t.Fatalf("WaitForRevision(%d) returned %v before the mirror got there", next, err)
	default:
	}
	put(t, c, root+"b", "2")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("WaitForRevision(%d) still blocked with the mirror at %d", next, ks.Revision())
	}

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	far := ks.Revision() + 1_000_000
	for _, tc := range []struct {
		name string
		ctx  context.Context
		rev  int64
		want error
	}{
		{"reached revision, canceled context", canceled, rev, nil},
		{"canceled", canceled, far, context.Canceled},
		{"deadline", short, far, context.DeadlineExceeded},
	} {
		if err := ks.WaitForRevision(tc.ctx, tc.rev); !errors.Is(err, tc.want) {
			t.Errorf("%s: WaitForRevision = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestChanged(t *testing.T) {
	c, root := etcdtest.Client(t)
	ks := New(root, decodeInt)
	ch := ks.Changed()
	load(t, ks, c, 0)
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed by Load")
	}
	startWatch(t, ks, c)

	ch = ks.Changed()
	before, _ := ks.Snapshot()
	select {
	case <-ch:
		t.Fatal("Changed closed without a change")
	default:
	}
	rev := put(t, c, root+"a", "1")
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatal("Changed not closed by a watched write")
	}
	after, got := ks.Snapshot()
	if got < rev || render(root, before) != "" || render(root, after) != "a=1" {
		t.Errorf("before %q, after %q at %d; want \"\" and \"a=1\" at %d", render(root, before), render(root, after), got, rev)
	}
}

func TestObserve(t *testing.T) {
	c, root := etcdtest.Client(t)
	ks := New(root, decodeInt)

	type call struct {
		rev int64
		kvs string
	}
	var mu sync.Mutex
	var calls, otherCalls []call
	record := func(to *[]call) func(KeyValues, int64) {
		return func(kvs KeyValues, rev int64) {
			mu.Lock()
			defer mu.Unlock()
			*to = append(*to, call{rev, render(root, kvs)})
		}
	}
	cancel := ks.Observe(record(&calls))
	cancelOther := ks.Observe(record(&otherCalls))
	defer cancelOther()

	// want is the mirror expected after each write, in revision order.
	want := []call{{put(t, c, root+"a", "1"), "a=1"}}
	load(t, ks, c, 0)
	want[0].rev = ks.Revision()
	startWatch(t, ks, c)
	want = append(want,
		call{put(t, c, root+"b", "2"), "a=1 b=2"},
		call{txn(t, c, clientv3.OpPut(root+"c", "3"), clientv3.OpDelete(root+"a")), "b=2 c=3"},
		call{put(t, c, root+"b", "20"), "b=20 c=3"},
		call{txn(t, c, clientv3.OpDelete(root+"c")), "b=20"},
	)
	waitRev(t, ks, want[len(want)-1].rev)

	mu.Lock()
	got := slices.Clone(calls)
	mu.Unlock()
	// Every call sees the mirror as of its revision. Changes that arrive
	// together are applied as one (one call for several revisions), and a
	// progress notification may add a call that repeats a state at a later
	// revision; the last change is always seen.
	var i int
	for j, g := range got {
		if j > 0 && g.rev <= got[j-1].rev {
			t.Errorf("call %d at revision %d after one at %d", j, g.rev, got[j-1].rev)
		}
		for i+1 < len(want) && want[i+1].rev <= g.rev {
			i++
		}
		if g.kvs != want[i].kvs {
			t.Errorf("call %d: %q at revision %d, want %q", j, g.kvs, g.rev, want[i].kvs)
		}
	}
	if last := want[len(want)-1]; !slices.Contains(got, last) {
		t.Errorf("no call for %q at revision %d; calls: %v", last.kvs, last.rev, got)
	}

	cancel()
	cancel() // A second cancel does nothing.
	rev := put(t, c, root+"d", "4")
	waitRev(t, ks, rev)
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != len(got) {
		t.Errorf("canceled observer called again: %v", calls[len(got):])
	}
	if !slices.Contains(otherCalls, call{rev, "b=20 d=4"}) {
		t.Errorf("remaining observer's calls %v lack b=20 d=4 at %d", otherCalls, rev)
	}
}

// TestCatchUpIsConsistent watches from far behind: etcd then sends the
// backlog in batches, and no batch may claim a revision whose state it does
// not hold.
func TestCatchUpIsConsistent(t *testing.T) {
	c, root := etcdtest.Client(t)
	ks := New(root, decodeInt)
	load(t, ks, c, 0)
	revs := make([]int64, 1500) // revs[i] is the revision at which k became i.
	for i := range revs {
		revs[i] = put(t, c, root+"k", strconv.Itoa(i))
	}
	var mu sync.Mutex
	var bad []string
	cancel := ks.Observe(func(kvs KeyValues, rev int64) {
		i := sort.Search(len(revs), func(i int) bool { return revs[i] > rev }) - 1
		if want := "k=" + strconv.Itoa(i); i < 0 || render(root, kvs) != want {
			mu.Lock()
			defer mu.Unlock()
			bad = append(bad, fmt.Sprintf("%q at revision %d, want %q", render(root, kvs), rev, want))
		}
	})
	defer cancel()
	startWatch(t, ks, c)
	waitRev(t, ks, revs[len(revs)-1])
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
}

func TestLoadAtRevision(t *testing.T) {
	c, root := etcdtest.Client(t)
	for _, k := range []string{"a", "b", "c"} {
		put(t, c, root+k, "1")
	}
	mid := put(t, c, root+"d", "1")
	put(t, c, root+"e", "2")
	last := txn(t, c, clientv3.OpDelete(root+"a"), clientv3.OpPut(root+"f", "3"))

	for _, pageSize := range []int{1, 2, 3, defaultPageSize} {
		for _, tc := range []struct {
			name string
			rev  int64
			want string
		}{
			{"older revision", mid, "a=1 b=1 c=1 d=1"},
			{"latest", 0, "b=1 c=1 d=1 e=2 f=3"},
		} {
			ks := New(root, decodeInt)
			ks.pageSize = pageSize
			load(t, ks, c, tc.rev)
			wantRev := tc.rev
			if wantRev == 0 {
				wantRev = last
			}
			if got := ks.Revision(); got < wantRev || (tc.rev != 0 && got != tc.rev) {
				t.Errorf("page size %d, %s: revision %d, want %d", pageSize, tc.name, got, wantRev)
			}
			checkSnapshot(t, ks, wantRev, tc.want)
		}
	}
}

func TestCompaction(t *testing.T) {
	_, c := startServer(t)
	ctx := context.Background()
	compact := func(rev int64) {
		t.Helper()
		if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("before watch", func(t *testing.T) {
		root := "/before/"
		put(t, c, root+"a", "1")
		put(t, c, root+"b", "2")
		ks := New(root, decodeInt)
		load(t, ks, c, 0)
		loaded := ks.Revision()
		put(t, c, root+"c", "3")
		put(t, c, root+"a", "10")
		last := txn(t, c, clientv3.OpDelete(root+"b"))
		compact(last)

		if err := ks.Load(ctx, c, loaded); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("Load at a compacted revision = %v, want ErrCompacted", err)
		}
		checkSnapshot(t, ks, loaded, "a=1 b=2") // A failed Load changes nothing.

		before := counterValue(t, reloads)
		startWatch(t, ks, c)
		waitRev(t, ks, last)
		checkSnapshot(t, ks, last, "a=10 c=3")
		if got := counterValue(t, reloads) - before; got != 1 {
			t.Errorf("%v reloads, want 1", got)
		}
		rev := put(t, c, root+"d", "4") // It watches on after the reload.
		waitRev(t, ks, rev)
		checkSnapshot(t, ks, rev, "a=10 c=3 d=4")
	})

	t.Run("while watching", func(t *testing.T) {
		root := "/while/"
		ks := New(root, decodeInt)
		load(t, ks, c, 0)
		before := counterValue(t, reloads)
		startWatch(t, ks, c)
		rev := put(t, c, root+"a", "1")
		waitRev(t, ks, rev)
		put(t, c, root+"b", "2")
		compact(put(t, c, root+"a", "3"))
		rev = put(t, c, root+"c", "4")
		waitRev(t, ks, rev)
		checkSnapshot(t, ks, rev, "a=3 b=2 c=4")
		if got := counterValue(t, reloads) - before; got != 0 {
			t.Errorf("%v reloads, want none", got)
		}
	})
}

func TestRestart(t *testing.T) {
	s, c := startServer(t)
	root := "/restart/"
	put(t, c, root+"a", "1")
	ks := New(root, decodeInt)
	load(t, ks, c, 0)
	startWatch(t, ks, c)
	rev := put(t, c, root+"b", "2")
	waitRev(t, ks, rev)

	s.Stop()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	// Write with a fresh client: the watching one may still be reconnecting.
	c2, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	put(t, c2, root+"c", "3")
	rev = txn(t, c2, clientv3.OpDelete(root+"a"), clientv3.OpPut(root+"b", "20"))
	waitRev(t, ks, rev)
	checkSnapshot(t, ks, rev, "b=20 c=3")
}

// gatedWatcher wraps the client's real Watcher so that a test can cancel the
// etcd watches it started and hold off new ones.
type gatedWatcher struct {
	clientv3.Watcher
	calls chan struct{} // receives a value on each Watch call

	mu      sync.Mutex
	cancels []context.CancelFunc
	gate    chan struct{} // if not nil, Watch waits for it to close
}

func (w *gatedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w.mu.Lock()
	gate := w.gate
	w.mu.Unlock()
	w.calls <- struct{}{}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			ch := make(chan clientv3.WatchResponse)
			close(ch)
			return ch
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	w.mu.Lock()
	w.cancels = append(w.cancels, cancel)
	w.mu.Unlock()
	return w.Watcher.Watch(ctx, key, opts...)
}

// cancelAll cancels every etcd watch started so far and holds off new ones
// until the returned function is called.
func (w *gatedWatcher) cancelAll() (release func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	gate := make(chan struct{})
	w.gate = gate
	for _, cancel := range w.cancels {
		cancel()
	}
	w.cancels = nil
	return func() {
		w.mu.Lock()
		w.gate = nil
		w.mu.Unlock()
		close(gate)
	}
}

func TestWatchCanceled(t *testing.T) {
	c, root := etcdtest.Client(t)
	gw := &gatedWatcher{Watcher: c.Watcher, calls: make(chan struct{}, 16)}
	c.Watcher = gw
	awaitCall := func() {
		t.Helper()
		select {
		case <-gw.calls:
		case <-time.After(waitTimeout):
			t.Fatal("no etcd watch started")
		}
	}

	put(t, c, root+"a", "1")
	ks := New(root, decodeInt)
	logs := captureLog(ks)
	load(t, ks, c, 0)
	before := counterValue(t, reloads)
	startWatch(t, ks, c)
	awaitCall()
	rev := put(t, c, root+"b", "2")
	waitRev(t, ks, rev)

	release := gw.cancelAll()
	awaitCall() // The canceled watch ended, and a new one waits at the gate.
	put(t, c, root+"c", "3")
	rev = txn(t, c, clientv3.OpDelete(root+"a"))
	release()
	waitRev(t, ks, rev)
	checkSnapshot(t, ks, rev, "b=2 c=3")

	if got := counterValue(t, reloads) - before; got != 0 {
		t.Errorf("%v reloads, want none: it should re-watch from the next revision", got)
	}
	if log := logs.String(); !strings.Contains(log, "retrying") {
		t.Errorf("retry not logged:\n%s", log)
	}
}

func keyValues(keys ...string) KeyValues {
	kvs := make([]*KeyValue, len(keys))
	for i, k := range keys {
		kvs[i] = &KeyValue{Raw: &mvccpb.KeyValue{Key: []byte(k)}, Decoded: k}
	}
	return NewKeyValues(kvs...)
}

func keysOf(kvs KeyValues) string {
	var keys []string
	for kv := range kvs.All() {
		keys = append(keys, string(kv.Raw.Key))
	}
	if n := kvs.Len(); n != len(keys) {
		return fmt.Sprintf("Len %d, but %d keys", n, len(keys))
	}
	return strings.Join(keys, " ")
}

func TestGet(t *testing.T) {
	kvs := keyValues("a", "ab", "abc", "b", "ba", "c")
	for _, tc := range []struct {
		key   string
		found bool
	}{
		{"", false}, {"a", true}, {"aa", false}, {"ab", true}, {"abc", true},
		{"abcd", false}, {"ba", true}, {"bb", false}, {"c", true}, {"d", false},
	} {
		kv, found := kvs.Get(tc.key)
		if found != tc.found || (found && string(kv.Raw.Key) != tc.key) {
			t.Errorf("Get(%q) = %v, %v; want found %v", tc.key, kv, found, tc.found)
		}
	}
	if _, found := (KeyValues{}).Get("a"); found {
		t.Errorf("Get on the zero KeyValues found a key")
	}
	// A view holds only the keys within its range.
	if _, found := kvs.Prefixed("a").Get("b"); found {
		t.Errorf(`Prefixed("a").Get("b") found a key outside the view`)
	}
	if _, found := kvs.Range("ab", "b").Get("abc"); !found {
		t.Errorf(`Range("ab", "b").Get("abc") did not find it`)
	}
}

func TestPrefixed(t *testing.T) {
	kvs := keyValues("a", "ab", "abc", "b", "ba", "c", "c\xff", "c\xff\xff", "d")
	for _, tc := range []struct{ prefix, want string }{
		{"", "a ab abc b ba c c\xff c\xff\xff d"},
		{"a", "a ab abc"},
		{"ab", "ab abc"},
		{"abc", "abc"},
		{"abcd", ""},
		{"b", "b ba"},
		{"c\xff", "c\xff c\xff\xff"},
		{"0", ""},
		{"x", ""},
	} {
		if got := keysOf(kvs.Prefixed(tc.prefix)); got != tc.want {
			t.Errorf("Prefixed(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	// A view of a view holds the keys within both.
	if got := keysOf(kvs.Prefixed("a").Prefixed("ab")); got != "ab abc" {
		t.Errorf(`Prefixed("a").Prefixed("ab") = %q`, got)
	}
	if got := keysOf(kvs.Prefixed("a").Prefixed("b")); got != "" {
		t.Errorf(`Prefixed("a").Prefixed("b") = %q`, got)
	}
	if got := keysOf((KeyValues{}).Prefixed("a")); got != "" {
		t.Errorf("Prefixed of the zero KeyValues = %q", got)
	}
}

func TestRange(t *testing.T) {
	kvs := keyValues("a", "ab", "abc", "b", "ba", "c")
	for _, tc := range []struct{ from, to, want string }{
		{"", "z", "a ab abc b ba c"},
		{"a", "b", "a ab abc"},
		{"ab", "ba", "ab abc b"},
		{"aa", "ab", ""},
		{"b", "b", ""},
		{"c", "a", ""},
		{"c", "\xff", "c"},
		{"0", "a", ""},
		{"0", "ab", "a"},
	} {
		if got := keysOf(kvs.Range(tc.from, tc.to)); got != tc.want {
			t.Errorf("Range(%q, %q) = %q, want %q", tc.from, tc.to, got, tc.want)
		}
	}
	// A range of a view stays within the view.
	if got := keysOf(kvs.Range("ab", "c").Range("a", "z")); got != "ab abc b ba" {
		t.Errorf(`Range("ab", "c").Range("a", "z") = %q`, got)
	}
	if got := keysOf(kvs.Range("ab", "c").Range("b", "z")); got != "b ba" {
		t.Errorf(`Range("ab", "c").Range("b", "z") = %q`, got)
	}
}

// events returns watch events of changes written "+key" (put) or "-key"
// (delete), in revision order from rev.
func events(changes string, rev int64) []*clientv3.Event {
	var evs []*clientv3.Event
	for _, f := range strings.Fields(changes) {
		ev := &clientv3.Event{Type: clientv3.EventTypePut,
			Kv: &mvccpb.KeyValue{Key: []byte(f[1:]), ModRevision: rev, Value: []byte("1")}}
		if f[0] == '-' {
			ev.Type = clientv3.EventTypeDelete
		}
		evs = append(evs, ev)
		rev++
	}
	return evs
}

func TestApplyEvents(t *testing.T) {
	for _, tc := range []struct {
		name, old, changes, want string
	}{
		{"into empty", "", "+b +a", "a b"},
		{"insert at both ends and between", "+b +d", "+e +a +c", "a b c d e"},
		{"delete", "+a +b +c", "-b -a", "c"},
		{"delete absent keys", "+b", "-a -c", "b"},
		{"replace", "+a +b", "+b", "a b"},
		{"last change of a key wins: put", "+a", "-b +b -a +a", "a b"},
		{"last change of a key wins: delete", "+a", "+b -b +a -a", ""},
		{"no changes", "+a +b", "", "a b"},
	} {
		ks := New("", nil)
		ks.applyEvents(events(tc.old, 1), 0)
		ks.publish(1)
		before, _ := ks.Snapshot()
		oldKeys := keysOf(before)
		ks.applyEvents(events(tc.changes, 2), 1)
		ks.publish(2)
		after, _ := ks.Snapshot()
		if got := keysOf(after); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
		if got := keysOf(before); got != oldKeys {
			t.Errorf("%s: the version before changed from %q to %q", tc.name, oldKeys, got)
		}
	}
}

// Every published version keeps the keys it had, however many changes
// follow, across splits and merges of the tree's nodes.
func TestVersionsAreImmutable(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	ks := New("", decodeInt)
	model := map[string]string{}
	type version struct {
		kvs  KeyValues
		want string
	}
	var versions []version
	// A reader reads versions while later ones are built, sharing their
	// nodes (under -race, this checks that building never writes to them).
	read := make(chan version)
	var wg sync.WaitGroup
	wg.Go(func() {
		for v := range read {
			if got := render("", v.kvs); got != v.want {
				t.Errorf("version read at once reads\n%s\nwant\n%s", got, v.want)
			}
		}
	})
	defer func() { close(read); wg.Wait() }()
	rev := int64(1)
	for step := range 400 {
		var evs []*clientv3.Event
		for range 1 + rnd.IntN(40) {
			key := fmt.Sprintf("k%04d", rnd.IntN(2000))
			ev := &clientv3.Event{Type: clientv3.EventTypePut,
				Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev, Value: []byte(strconv.Itoa(step))}}
			if rnd.IntN(3) == 0 {
				ev.Type = clientv3.EventTypeDelete
				delete(model, key)
			} else {
				model[key] = strconv.Itoa(step)
			}
			evs = append(evs, ev)
			rev++
		}
		ks.applyEvents(evs, 0)
		ks.publish(rev)
		kvs, _ := ks.Snapshot()
		versions = append(versions, version{kvs, renderModel(model)})
		if step%2 == 0 {
			read <- versions[len(versions)-1]
		}
	}
	for i, v := range versions {
		if got := render("", v.kvs); got != v.want {
			t.Fatalf("version %d now reads\n%s\nwant\n%s", i, got, v.want)
		}
	}
}

// renderModel renders a map of keys to values as render does a mirror.
func renderModel(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}

// Sync returns once the mirror holds every write etcd made before it was
// called, including when the latest writes are under other prefixes
// (whose revisions only a progress notification brings the mirror to).
func TestSync(t *testing.T) {
	c, root := etcdtest.Client(t)
	ks := New(root, decodeInt)
	load(t, ks, c, 0)
	startWatch(t, ks, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 20 {
		key := fmt.Sprintf("%sk%d", root, i)
		put(t, c, key, strconv.Itoa(i))
		put(t, c, strings.TrimSuffix(root, "/")+"-other/"+strconv.Itoa(i), "x") // Etcd's revision moves past the mirror's.
		if err := ks.Sync(ctx, c); err != nil {
			t.Fatalf("Sync after write %d: %v", i, err)
		}
		kvs, _ := ks.Snapshot()
		if _, ok := kvs.Get(key); !ok {
			t.Fatalf("after Sync the mirror lacks %s, written before it", key)
		}
	}
}

// A revision that etcd reached by writes under other prefixes only is
// reached promptly: a waiter asks the watch for progress rather than
// waiting for an event under Root that may never come.
func TestWaitForRevisionOfWritesElsewhere(t *testing.T) {
	c, root := etcdtest.Client(t)
	ks := New(root, decodeInt)
	load(t, ks, c, 0)
	startWatch(t, ks, c)
	other := strings.TrimSuffix(root, "/") + "-elsewhere/"
	for i := range 10 {
		rev := put(t, c, other+strconv.Itoa(i), "x")
		// Far less than the watch's own periodic progress (10 minutes),
		// and than the 5 s that servers give a wait.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := ks.WaitForRevision(ctx, rev)
		cancel()
		if err != nil {
			t.Fatalf("write %d elsewhere at revision %d: WaitForRevision: %v (mirror at %d)", i, rev, err, ks.Revision())
		}
	}
	// Many waiters at once share requests, and all get there.
	rev := put(t, c, other+"many", "x")
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			errs <- ks.WaitForRevision(ctx, rev)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("one of many waiters for revision %d: %v", rev, err)
		}
	}
}
