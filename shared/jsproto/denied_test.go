package jsproto_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

// startRestricted starts a JetStream server whose user "reader" may only
// ask for the account's info, and connects as that user.
func startRestricted(t *testing.T) *nats.Conn {
	t.Helper()
	reader := &server.User{Username: "reader", Password: "pw", Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.INFO"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, Users: []*server.User{reader}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(timeout) {
		t.Fatal("server not ready")
	}
	// The library's own error handler only logs: the violation must reach
	// Retry through the connection, whatever handler the caller installed.
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("reader", "pw"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestRetryDenied: a request the user has no right to fails at once as a
// *DeniedError naming the role and the subject, not after the caller's
// deadline as an outage; a request it may send is not affected.
func TestRetryDenied(t *testing.T) {
	nc := startRestricted(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r := jsproto.Tries{Conn: nc}

	if err := r.Do(ctx, "reading the account", func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	}); err != nil {
		t.Fatalf("an allowed request: %v", err)
	}

	start := time.Now()
	err = r.Do(ctx, "reading stream X", func(ctx context.Context) error {
		_, err := js.Stream(ctx, "X")
		return err
	})
	took := time.Since(start)
	var denied *jsproto.DeniedError
	if !errors.As(err, &denied) || !errors.Is(err, jsproto.ErrDenied) || !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("error %v (%T), want a *DeniedError", err, err)
	}
	if errors.Is(err, jsproto.ErrUnavailable) {
		t.Fatalf("a denied request reads as an outage: %v", err)
	}
	if took > 2*time.Second {
		t.Fatalf("the denied request took %s, want at once", took)
	}
	for _, want := range []string{"the role reader may not", `publish to "$JS.API.STREAM.INFO.X"`, "reading stream X"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	t.Logf("refused in %s: %v", took.Round(time.Millisecond), err)
	if jsproto.Retryable(err) {
		t.Errorf("Retryable(%v) = true", err)
	}

	// The violation seen, an allowed request right after is not blamed
	// for it.
	if err := r.Do(ctx, "reading the account", func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	}); err != nil {
		t.Fatalf("an allowed request after a denied one: %v", err)
	}
}
