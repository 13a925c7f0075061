package broker

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/quire-dev/quire/fragment"
)

// persistJob persists one local fragment.
type persistJob struct {
	frag  fragment.Fragment // Codec set; Store is the target URL
	open  func() (io.ReadCloser, error)
	done  func(stored fragment.Fragment) // after success: index it, delete local files
	tries int
}

// persister copies rolled and recovered spools to fragment stores, retrying
// until it succeeds or the broker stops (whatever is left is recovered at
// the next start). Wait blocks until everything queued so far is stored.
type persister struct {
	srv   *Server
	mu    sync.Mutex
	cond  sync.Cond
	queue []*persistJob
	// pending counts the jobs queued, in flight or waiting to retry, and
	// pendingBytes their content: what this broker holds that no store
	// does, besides its open spools. The gauges sum them over the
	// persisters of the process, until a persister stops (stopped).
	pending      int
	pendingBytes int64
	stopped      bool
}

func newPersister(srv *Server) *persister {
	p := &persister{srv: srv}
	p.cond.L = &p.mu
	return p
}

func (p *persister) enqueue(j *persistJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, j)
	p.count(1, j.frag.Len())
	p.cond.Broadcast()
}

// count adds n jobs with size bytes of content to the pending ones, and
// to the gauges while the persister runs. Callers hold p.mu.
func (p *persister) count(n int, size int64) {
	p.pending += n
	p.pendingBytes += size
	if !p.stopped {
		persistQueueFragments.Add(float64(n))
		persistQueueBytes.Add(float64(size))
	}
}

// run persists jobs with n workers until ctx is done.
func (p *persister) run(ctx context.Context, n int) {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := p.next(ctx); j != nil; j = p.next(ctx) {
				p.persist(ctx, j)
			}
		}()
	}
	wg.Wait()
	// What is left is recovered from disk at the next start; the process's
	// gauges no longer count it.
	p.mu.Lock()
	defer p.mu.Unlock()
	persistQueueFragments.Sub(float64(p.pending))
	persistQueueBytes.Sub(float64(p.pendingBytes))
	p.stopped = true
}

func (p *persister) next(ctx context.Context) *persistJob {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) == 0 && ctx.Err() == nil {
		p.cond.Wait()
	}
	if ctx.Err() != nil {
		return nil
	}
	j := p.queue[0]
	p.queue = p.queue[1:]
	return j
}

func (p *persister) persist(ctx context.Context, j *persistJob) {
	err := p.try(ctx, j)
	if err == nil {
		fragmentsPersisted.Inc()
		bytesPersisted.Add(float64(j.frag.Len()))
		j.done(j.frag)
		p.finish(j)
		return
	}
	if ctx.Err() != nil {
		return
	}
	j.tries++
	delay := min(time.Duration(j.tries)*500*time.Millisecond, 30*time.Second)
	p.srv.log.Warn("persisting fragment failed; will retry", "fragment", j.frag.Name(),
		"store", j.frag.Store, "err", err, "retryIn", delay)
	persistErrors.Inc()
	time.AfterFunc(delay, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.queue = append(p.queue, j)
		p.cond.Broadcast()
	})
}

// persistHook is called before a fragment is persisted; a variable for
// tests.
var persistHook = func(fragment.Fragment) {}

func (p *persister) try(ctx context.Context, j *persistJob) error {
	store, err := p.srv.stores.get(ctx, j.frag.Store)
	if err != nil {
		return err
	}
	rc, err := j.open()
	if err != nil {
		return err
	}
	defer rc.Close()
	persistHook(j.frag)
	return store.Persist(ctx, j.frag, rc)
}

func (p *persister) finish(j *persistJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count(-1, -j.frag.Len())
	p.cond.Broadcast()
}

// wait returns once every job queued before or during the call is
// persisted, or ctx is done.
func (p *persister) wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.pending > 0 && ctx.Err() == nil {
		p.cond.Wait()
	}
	return ctx.Err()
}

// storeCache opens each fragment store once.
type storeCache struct {
	mu     sync.Mutex
	stores map[string]fragment.Store
}

func (c *storeCache) get(ctx context.Context, url string) (fragment.Store, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.stores[url]; ok {
		return s, nil
	}
	s, err := fragment.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	if c.stores == nil {
		c.stores = make(map[string]fragment.Store)
	}
	c.stores[url] = s
	return s, nil
}
