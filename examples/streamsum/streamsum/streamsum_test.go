package streamsum_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/examples/streamsum/streamsum"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/internal/etcdtest"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// sumsOf returns the right sums of every stream that chunks finish.
func sumsOf(chunks ...[]*streamsum.Chunk) []*streamsum.Sum {
	total := map[string]uint64{}
	var sums []*streamsum.Sum
	for _, txn := range chunks {
		for _, c := range txn {
			total[c.Stream] += c.Value
			if c.Last {
				sums = append(sums, &streamsum.Sum{Stream: c.Stream, Sum: total[c.Stream], Chunks: c.Seq})
			}
		}
	}
	return sums
}

// TestCheckFindsWrongSums: the checker's verdicts on sums right, wrong,
// missing, duplicated and unexpected, and on transactions that failed.
func TestCheckFindsWrongSums(t *testing.T) {
	ss := streamsum.NewStreams(1, "s", 2)
	var txns [][]*streamsum.Chunk
	for range 40 {
		txn := ss.Next(3)
		ss.Published(txn, nil)
		txns = append(txns, txn)
	}
	last := ss.Finish()
	ss.Published(last, nil)
	txns = append(txns, last)
	right := sumsOf(txns...)
	if r := ss.Check(right); !r.OK() || r.Right != len(right) || r.Finished != len(right) {
		t.Fatalf("right sums: %s, %v; want %d right", r, r.Problems, len(right))
	}

	wrong := *right[0]
	wrong.Sum++
	cases := []struct {
		name string
		sums []*streamsum.Sum
		want func(streamsum.Report) int
	}{
		{"wrong value", slices.Concat([]*streamsum.Sum{&wrong}, right[1:]), func(r streamsum.Report) int { return r.Wrong }},
		{"problem", slices.Concat(right, []*streamsum.Sum{{Stream: right[1].Stream, Problem: "chunk 3 where chunk 4 was due"}}), func(r streamsum.Report) int { return r.Wrong }},
		{"missing", right[1:], func(r streamsum.Report) int { return r.Missing }},
		{"duplicated", slices.Concat(right, right[2:3]), func(r streamsum.Report) int { return r.Duplicated }},
		{"unexpected", slices.Concat(right, []*streamsum.Sum{{Stream: "s-never", Sum: 1, Chunks: 1}}), func(r streamsum.Report) int { return r.Unexpected }},
	}
	for _, tc := range cases {
		r := ss.Check(tc.sums)
		if r.OK() || tc.want(r) != 1 || len(r.Problems) == 0 {
			t.Errorf("%s: %s, %v; want it found once", tc.name, r, r.Problems)
		}
	}
}

// TestCheckOfFailedTransactions: a stream whose transaction certainly
// aborted has no sum; one whose last chunk's transaction may have
// committed has its full sum at most once.
func TestCheckOfFailedTransactions(t *testing.T) {
	ss := streamsum.NewStreams(2, "s", 1)
	var first []*streamsum.Chunk
	for len(first) == 0 || !first[len(first)-1].Last {
		txn := ss.Next(1)
		first = append(first, txn...)
		if !txn[0].Last {
			ss.Published(txn, nil)
		}
	}
	uncertain := errors.New("acknowledgement failed")
	ss.Published(first[len(first)-1:], uncertain) // Its last chunk.
	aborted := ss.Next(2)
	ss.Published(aborted, fmt.Errorf("%w: append failed", streamsum.ErrAborted))
	ss.Finish()

	full := sumsOf(first)
	if r := ss.Check(nil); !r.OK() || r.Finished != 0 {
		t.Errorf("no sums: %s, %v; want nothing wrong", r, r.Problems)
	}
	if r := ss.Check(full); !r.OK() {
		t.Errorf("the uncertain stream's full sum: %s, %v; want nothing wrong", r, r.Problems)
	}
	if r := ss.Check(slices.Concat(full, full)); r.Duplicated != 1 {
		t.Errorf("the uncertain stream's sum twice: %s; want a duplicate", r)
	}
	partial := sumsOf(first[:len(first)-1], []*streamsum.Chunk{{Stream: first[0].Stream, Seq: len(first), Last: true}})
	if r := ss.Check(partial); r.Wrong != 1 {
		t.Errorf("the uncertain stream's sum without its last chunk's value: %s; want it wrong", r)
	}
	if r := ss.Check([]*streamsum.Sum{{Stream: aborted[0].Stream, Sum: aborted[0].Value, Chunks: 1}}); r.Unexpected != 1 {
		t.Errorf("a sum of an aborted stream: %s; want it unexpected", r)
	}
}

// TestSumsExactlyOnceThroughCrashes runs the application on 3 brokers
// and 2 processes, crashing the process that is primary of shard 0
// while producers publish, and checks every sum.
func TestSumsExactlyOnceThroughCrashes(t *testing.T) {
	bc := brokertest.New(t)
	b := bc.Start("b1")
	bc.Start("b2")
	bc.Start("b3")
	journals := bc.Client(b)
	root := strings.TrimSuffix(bc.Root, "/") + "-streamsum/"
	fleet := consumertest.New(t, bc.Etcd, journals, root, streamsum.App{})
	fleet.LeaseTTL = consumertest.ShortLeaseTTL // A crashed primary's shards fail over when it runs out.
	fleet.Start("p1", "za")
	fleet.Start("p2", "zb")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := streamsum.Setup(ctx, streamsum.SetupConfig{Journals: journals, Shards: fleet.Client(fleet.Procs["p1"]),
		Root: root, Replication: 3, HotStandbys: 1}); err != nil {
		t.Fatal(err)
	}
	prod, err := streamsum.NewProducer(ctx, journals)
	for errors.Is(err, streamsum.ErrNotSetUp) { // Until the broker lists the new journals.
		time.Sleep(20 * time.Millisecond)
		prod, err = streamsum.NewProducer(ctx, journals)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ss := streamsum.NewStreams(3, "s", 12)
	publish := func(chunks []*streamsum.Chunk) {
		err := prod.Publish(ctx, chunks)
		if err != nil {
			t.Fatalf("publishing: %v", err) // Nothing here should fail.
		}
		ss.Published(chunks, err)
	}
	for round := range 3 {
		for range 60 {
			publish(ss.Next(6))
		}
		// Once the shards are busy summing, a crash of one process, and
		// a new one in its zone.
		awaitSums(t, ctx, journals, 10*(round+1))
		crashed := fleet.Procs[fmt.Sprintf("p%d", round%2+1)]
		fleet.Crash(crashed)
		delete(fleet.Procs, crashed.Name)
		fleet.Start(fmt.Sprintf("p%d", round%2+1), crashed.Zone)
	}
	publish(ss.Finish())
	r, err := ss.Await(ctx, journals, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Problems {
		t.Error(p)
	}
	if !r.OK() || r.Finished == 0 || r.Right != r.Finished {
		t.Errorf("%s; want every finished stream summed right, once", r)
	}
	t.Log(r)
}

// awaitSums waits until the shards have published n sums.
func awaitSums(t *testing.T, ctx context.Context, journals *client.Client, n int) {
	t.Helper()
	for {
		sums, err := streamsum.ReadSums(ctx, journals)
		if err == nil && len(sums) >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d sums: %d so far, err %v", n, len(sums), err)
		case <-time.After(50 * time.Millisecond): // Polling the shards' progress.
		}
	}
}
