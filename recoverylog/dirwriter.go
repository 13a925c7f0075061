package recoverylog

import (
	"fmt"
	"os"
	"sync"
)

// dirWriter makes the writes and truncates of playback in a goroutine of
// its own, so that reading, checking and decoding the log overlap writing
// files: with a core for each, playback runs at about the speed of the
// slower of the two rather than of their sum. It also starts writing back,
// in another goroutine, each file that playback tells it is complete, so
// that the disk writes them while playback goes on, and little is left for
// the sync that ends playback.
//
// The player keeps every other effect in the log's order by calling wait
// before it: creates need no wait (their writes are queued after them),
// but unlinks, renames and links do, and so does closing a file.
type dirWriter struct {
	reqs       chan writeReq
	writebacks chan writebackReq
	// free holds the op bodies the goroutine is done with. Its capacity
	// bounds the bodies queued, and so the memory playback holds.
	free chan []byte
	wg   sync.WaitGroup

	mu  sync.Mutex
	err error // The first failure, returned by wait and close.
}

// writeReq is one effect on a file. A nil data with truncate set is a
// truncate to offset; done, if not nil, is closed once every request
// before it is made.
type writeReq struct {
	f        *os.File
	node     uint64
	data     []byte // The op's data, within body.
	body     []byte // Given back to free once written.
	offset   int64
	truncate bool
	complete bool // The file is complete: start its writeback.
	done     chan struct{}
}

type writebackReq struct {
	f    *os.File
	node uint64
}

// dirWriterBodies is how many op bodies may be queued, or being read into.
const dirWriterBodies = 8

func newDirWriter() *dirWriter {
	w := &dirWriter{reqs: make(chan writeReq, dirWriterBodies), writebacks: make(chan writebackReq, 1024),
		free: make(chan []byte, dirWriterBodies)}
	for range dirWriterBodies - 1 { // The op reader holds the last body.
		w.free <- nil
	}
	w.wg.Add(2)
	go w.write()
	go w.writeBack()
	return w
}

// write makes the requests in order until reqs is closed.
func (w *dirWriter) write() {
	defer w.wg.Done()
	defer close(w.writebacks)
	var next *writeReq // Received, not yet made.
	for {
		req, ok := next, next != nil
		if !ok {
			r, open := <-w.reqs
			if !open {
				return
			}
			req = &r
		}
		next = nil
		switch {
		case req.done != nil:
			close(req.done)
			continue
		case w.failed():
			w.finish(req)
		case req.truncate:
			w.fail(req.node, req.f.Truncate(req.offset))
			w.finish(req)
		default:
			next = w.writeRun(req)
		}
	}
}

// writeRun writes req together with the writes queued behind it that
// continue it in its file, in one system call where the system allows:
// ops of a few KiB each (Pebble's) cost much more written one by one. It
// returns the first request received that does not continue the run.
func (w *dirWriter) writeRun(req *writeReq) *writeReq {
	run := []*writeReq{req}
	bufs := [][]byte{req.data}
	end := req.offset + int64(len(req.data))
	var next *writeReq
gather:
	for len(run) < dirWriterBodies {
		select {
		case r, ok := <-w.reqs:
			switch {
			case !ok:
				break gather
			case r.done != nil || r.truncate || r.f != req.f || r.offset != end:
				next = &r
				break gather
			}
			run, bufs = append(run, &r), append(bufs, r.data)
			end += int64(len(r.data))
		default:
			break gather
		}
	}
	w.fail(req.node, writeAtv(req.f, bufs, req.offset))
	for _, r := range run {
		w.finish(r)
	}
	return next
}

// finish gives back req's body, and starts the writeback of its file if
// it is complete.
func (w *dirWriter) finish(req *writeReq) {
	if req.body != nil {
		w.free <- req.body
	}
	if req.complete && !w.failed() {
		w.writebacks <- writebackReq{req.f, req.node}
	}
}

// writeBack starts the writeback of complete files until writebacks is
// closed. Started early, the writeback runs at the disk's speed while the
// log is read: waiting for it all in the final sync took about a second
// a GiB here.
func (w *dirWriter) writeBack() {
	defer w.wg.Done()
	for req := range w.writebacks {
		if !w.failed() {
			w.fail(req.node, startWriteback(req.f))
		}
	}
}

func (w *dirWriter) fail(node uint64, err error) {
	if err == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("recoverylog: writing node %d: %w", node, err)
	}
}

func (w *dirWriter) failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err != nil
}

// writeAt queues a write of data, which lies within body, at offset of
// f. It returns a body for the op reader to read the next op into, and
// the first failure of an earlier request, if any.
func (w *dirWriter) writeAt(f *os.File, node uint64, body, data []byte, offset int64, complete bool) ([]byte, error) {
	if w.failed() {
		return body, w.wait()
	}
	w.reqs <- writeReq{f: f, node: node, body: body, data: data, offset: offset, complete: complete}
	return <-w.free, nil
}

// truncate queues a truncate of f to size.
func (w *dirWriter) truncate(f *os.File, node uint64, size int64) error {
	if w.failed() {
		return w.wait()
	}
	w.reqs <- writeReq{f: f, node: node, offset: size, truncate: true}
	return nil
}

// wait returns once every write queued so far is made (writebacks may
// still run), with the first failure.
func (w *dirWriter) wait() error {
	done := make(chan struct{})
	w.reqs <- writeReq{done: done}
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// close makes what is queued, waits for both goroutines, and returns the
// first failure.
func (w *dirWriter) close() error {
	close(w.reqs)
	w.wg.Wait()
	return w.err
}
