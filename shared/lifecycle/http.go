package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// HTTPServer runs an *http.Server with the shared lifecycle: Start listens
// and serves in the background, Stop shuts it down gracefully (in-flight
// requests finish) and closes it hard when Stop's context ends. The
// broker and the consumer's metrics and health listener use it.
type HTTPServer struct {
	srv  *http.Server
	life Lifecycle
	hard chan struct{} // closed by the hard stop

	mu   sync.Mutex
	addr string
	done chan struct{} // closed when Serve returned
	err  error         // Serve's error, when not a stop
}

// NewHTTPServer returns a server for srv, which must have its Addr set.
func NewHTTPServer(srv *http.Server) *HTTPServer {
	return &HTTPServer{srv: srv, hard: make(chan struct{})}
}

// Start listens on the server's Addr and serves in the background. ctx
// bounds start-up only.
func (s *HTTPServer) Start(ctx context.Context) error {
	return s.life.Start(ctx, func(ctx context.Context) error {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", s.srv.Addr)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", s.srv.Addr, err)
		}
		s.mu.Lock()
		s.addr = ln.Addr().String()
		s.done = make(chan struct{})
		s.mu.Unlock()
		go func() {
			defer close(s.done)
			if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
				s.life.Ended()
			}
		}()
		return nil
	})
}

// Addr is the address listened on, port resolved; empty before Start.
func (s *HTTPServer) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Stop shuts the server down: it stops listening and waits for in-flight
// requests, up to ctx's end, when it closes every connection.
func (s *HTTPServer) Stop(ctx context.Context) error {
	return s.life.Stop(ctx, func() {
		// Shutdown under a context that only the hard stop ends.
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		go func() {
			select {
			case <-s.hard:
				cancel()
			case <-sctx.Done():
			}
		}()
		if err := s.srv.Shutdown(sctx); err != nil {
			_ = s.srv.Close() // the hard stop: abandon what is in flight
		}
		<-s.done
	}, s.abort)
}

// abort is the hard stop; Lifecycle calls it at most once.
func (s *HTTPServer) abort() { close(s.hard) }

// Stopped is closed once the server has stopped serving.
func (s *HTTPServer) Stopped() <-chan struct{} { return s.life.Stopped() }

// Err returns why the server stopped by itself (Serve failed), or nil.
func (s *HTTPServer) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
