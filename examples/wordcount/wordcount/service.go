package wordcount

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/examples/wordcount/wordcountpb"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

// MaxWords is the most words one Count request may ask for.
const MaxWords = 10000

// service serves the WordCount RPC in a consumer process.
type service struct {
	wordcountpb.UnimplementedWordCountServer
	srv *consumer.Server
}

// Count answers each word's count from the store of its shard's primary:
// this process's, or another's, to which it forwards the words.
func (s *service) Count(ctx context.Context, req *wordcountpb.CountRequest) (*wordcountpb.CountResponse, error) {
	switch {
	case len(req.Words) == 0:
		return nil, status.Error(codes.InvalidArgument, "words: none given")
	case len(req.Words) > MaxWords:
		return nil, status.Errorf(codes.InvalidArgument, "words: %d, more than the %d a request may hold", len(req.Words), MaxWords)
	}
	for i, w := range req.Words {
		if w == "" {
			return nil, status.Errorf(codes.InvalidArgument, "words[%d] is empty", i)
		}
	}
	journals, shardOf, err := s.partitions(ctx)
	if err != nil {
		return nil, err
	}
	// Words by shard, as indexes into req.Words.
	groups := map[string][]int{}
	for i, w := range req.Words {
		sh := shardOf[partitionOf(w, journals)]
		groups[sh] = append(groups[sh], i)
	}
	out := &wordcountpb.CountResponse{Counts: make([]*wordcountpb.CountResponse_Count, len(req.Words))}
	var wg sync.WaitGroup
	errs := make(chan error, len(groups))
	for shard, idx := range groups {
		words := make([]string, len(idx))
		for k, i := range idx {
			words[k] = req.Words[i]
		}
		wg.Go(func() {
			counts, err := s.countIn(ctx, shard, words, req)
			if err != nil {
				errs <- err
				return
			}
			for k, i := range idx {
				out.Counts[i] = &wordcountpb.CountResponse_Count{Word: words[k], Count: counts[k], Shard: shard}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return out, nil
}

// partitions returns the journals the application's shards read, sorted
// (the partitions that Publish maps words over), and the shard of each.
func (s *service) partitions(ctx context.Context) ([]string, map[string]string, error) {
	// Every shard, whatever the caller may list: words map over all the
	// partitions.
	list, err := s.srv.List(auth.Internal(ctx), &protocol.ShardListRequest{Selector: Selector})
	if err != nil {
		return nil, nil, err
	}
	shardOf := map[string]string{}
	var journals []string
	for _, sh := range list.Shards {
		spec, err := consumer.UnmarshalShardSpec(sh.Spec)
		if err != nil {
			return nil, nil, status.Errorf(codes.Internal, "listing shards: %v", err)
		}
		for _, src := range spec.Sources {
			shardOf[src.Journal] = spec.ID
			journals = append(journals, src.Journal)
		}
	}
	if len(journals) == 0 {
		return nil, nil, status.Errorf(codes.FailedPrecondition,
			"no shards labelled %s: the application is not set up (quire dev sets it up)", Selector)
	}
	slices.Sort(journals)
	return journals, shardOf, nil
}

// countIn counts words of shard at its primary, trying again while the
// shard has no primary or its primary moves.
func (s *service) countIn(ctx context.Context, shard string, words []string, req *wordcountpb.CountRequest) ([]uint64, error) {
	backoff := 20 * time.Millisecond
	for {
		counts, err := s.countOnce(ctx, shard, words, req)
		if err == nil || req.DoNotProxy || !retryable(err) {
			return counts, err
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		case <-ctx.Done():
			return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(), "counting in shard %s: %v", shard, err)
		}
	}
}

func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.FailedPrecondition:
		return true
	}
	return false
}

// countOnce counts words of shard: here, if this process is its primary,
// else by forwarding them to the primary.
func (s *service) countOnce(ctx context.Context, shard string, words []string, req *wordcountpb.CountRequest) ([]uint64, error) {
	// A count is a shard's state: asking for it needs STAT on the shard.
	if err := s.srv.Require(ctx, auth.Stat, shard); err != nil {
		return nil, err
	}
	res, err := s.srv.Resolve(ctx, shard)
	switch {
	case errors.Is(err, consumer.ErrShardNotFound):
		return nil, status.Errorf(codes.NotFound, "%v", err)
	case errors.Is(err, consumer.ErrNoPrimary):
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	case err != nil:
		return nil, status.FromContextError(err).Err()
	}
	defer res.Done()
	if res.Store == nil {
		if req.DoNotProxy {
			return nil, status.Errorf(codes.FailedPrecondition, "not the primary of shard %s, which is at %s", shard, res.Endpoint)
		}
		conn, err := s.srv.Dial(res.Endpoint)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "forwarding to the primary of %s: %v", shard, err)
		}
		resp, err := wordcountpb.NewWordCountClient(conn).Count(auth.ForwardCaller(ctx),
			&wordcountpb.CountRequest{Words: words, Sync: req.Sync, DoNotProxy: true})
		if err != nil {
			return nil, err
		}
		counts := make([]uint64, len(words))
		for i, c := range resp.Counts {
			counts[i] = c.GetCount()
		}
		return counts, nil
	}
	if req.Sync {
		if err := s.awaitSync(ctx, res, shard); err != nil {
			return nil, err
		}
	}
	return readCounts(res.Store, words)
}

// awaitSync waits until the shard's committed store reflects its sources
// read through their write heads as of now.
func (s *service) awaitSync(ctx context.Context, res consumer.Resolution, shard string) error {
	heads := map[string]int64{}
	for _, src := range res.Shard.Spec().Sources {
		head, err := res.Shard.Journals().WriteHead(ctx, src.Journal)
		if err != nil {
			return status.Errorf(codes.Unavailable, "%v", err)
		}
		heads[src.Journal] = head
	}
	resp, err := s.srv.Stat(auth.Internal(ctx), &protocol.ShardStatRequest{Shard: shard, ReadThrough: heads, DoNotProxy: true})
	if err != nil {
		return err
	}
	if resp.Status != protocol.Status_OK {
		return status.Errorf(codes.Unavailable, "shard %s: %s", shard, resp.Status)
	}
	return nil
}

// readCounts reads words' counts from a primary's committed state, which
// the Resolution holds open.
func readCounts(st store.Store, words []string) ([]uint64, error) {
	p, ok := st.(*store.Pebble)
	if !ok {
		return nil, status.Errorf(codes.Internal, "the store is a %T, not a *store.Pebble", st)
	}
	counts := make([]uint64, len(words))
	for i, w := range words {
		var err error
		if counts[i], err = ReadCount(p.DB(), w); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return counts, nil
}
