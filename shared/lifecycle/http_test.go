package lifecycle_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/spoolq/spool/shared/lifecycle"
)

func TestHTTPServerGracefulThenHard(t *testing.T) {
	t.Parallel()
	inHandler := make(chan struct{})
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		close(inHandler)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "done")
	})
	s := lifecycle.NewHTTPServer(&http.Server{Addr: "127.0.0.1:0", Handler: mux, ReadHeaderTimeout: time.Second})
	if err := s.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if s.Addr() == "" || s.Addr() == "127.0.0.1:0" {
		t.Fatalf("Addr = %q, want the resolved port", s.Addr())
	}
	got := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr() + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	<-inHandler
	// A graceful stop waits for the request in flight: give it a short
	// deadline, so the hard stop closes the connection.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := s.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with a request in flight = %v, want the deadline", err)
	}
	select {
	case <-s.Stopped():
	case <-time.After(10 * time.Second):
		t.Fatal("server not stopped 10s after the hard stop")
	}
	close(release)
	if err := <-got; err == nil {
		t.Error("the request in flight was answered after a hard stop")
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Errorf("second Stop = %v", err)
	}
	if s.Err() != nil {
		t.Errorf("Err = %v after a stop", s.Err())
	}
}

func TestHTTPServerGraceful(t *testing.T) {
	t.Parallel()
	s := lifecycle.NewHTTPServer(&http.Server{Addr: "127.0.0.1:0", Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second})
	if err := s.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	resp, err := http.Get("http://" + s.Addr() + "/")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()
	if err := s.Stop(t.Context()); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if _, err := http.Get("http://" + s.Addr() + "/"); err == nil {
		t.Error("still serving after Stop")
	}
}

func TestHTTPServerListenError(t *testing.T) {
	t.Parallel()
	s := lifecycle.NewHTTPServer(&http.Server{Addr: "127.0.0.1:-1", ReadHeaderTimeout: time.Second})
	if err := s.Start(t.Context()); err == nil {
		t.Fatal("Start on a bad address succeeded")
	}
}
