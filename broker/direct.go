package broker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/quire-dev/quire/protocol"
)

// Direct reads (ReadRequest.direct): a reader that can reach the fragment
// stores fetches persisted content from them itself, so that backfills and
// recoveries reading a journal's history do not load the brokers that
// serve its live appends. The broker only says where the content is.

// directURLTTL is how long the URLs of direct reads are valid. A reader
// fetches at once, and an object store checks a signed URL when the
// request begins, not while the body streams; an hour leaves room for a
// reader that is slow to get to it, without handing out lasting access.
const directURLTTL = time.Hour

var readsDirect = promauto.NewCounter(prometheus.CounterOpts{
	Name: "quire_broker_reads_direct_total",
	Help: "Reads of persisted fragments answered with the fragment's URL in its store (ReadRequest.direct), for the reader to fetch it itself.",
})

// sendDirect answers a direct read that reached e at offset with e's
// fragment and a URL of it in its store, and no content, reporting true:
// the read is then over. It sends nothing and reports false when the read
// is to be served with content as usual: it is not direct, e is local (a
// spool is read only here), or e's store cannot sign a URL (an S3 store
// without credentials that sign, say): the broker then proxies the
// content, as for a reader that cannot reach the store.
func (s *Server) sendDirect(ctx context.Context, stream protocol.Journal_ReadServer, req *protocol.ReadRequest, e entry, offset, head int64) (bool, error) {
	if !req.Direct || e.local() || e.frag.Store == "" {
		return false, nil
	}
	store, err := s.storeFor(ctx, e.frag.Store)
	if err != nil || store == nil {
		return false, nil // Reading it here fails as it should.
	}
	url, err := store.SignURL(ctx, e.frag, directURLTTL)
	if err != nil || url == "" {
		s.log.Debug("cannot sign a URL for a direct read; serving its content", "journal", e.frag.Journal,
			"fragment", e.frag.Name(), "store", e.frag.Store, "err", err)
		return false, nil
	}
	readsDirect.Inc()
	return true, stream.Send(&protocol.ReadResponse{Status: protocol.Status_OK, Offset: offset, WriteHead: head,
		Fragment: protoFragment(e.frag), FragmentUrl: url})
}
