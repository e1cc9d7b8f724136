package remote_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams/embedded"
)

// remoteServer starts an embedded server owned by t and returns its client
// URL.
func remoteServer(t *testing.T) string {
	t.Helper()
	s, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

// remoteConnect opens a connection closed when t ends.
func remoteConnect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func remoteLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// remoteRespond subscribes a responder on its own connection and waits until the
// server knows about it, so the handler's request cannot race the
// subscription.
func remoteRespond(t *testing.T, url, subject string, f func(m *nats.Msg)) {
	t.Helper()
	nc := remoteConnect(t, url)
	if _, err := nc.QueueSubscribe(subject, "workers", f); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func remoteTask() *consumer.Task {
	h := nats.Header{}
	h.Set(spool.HeaderMsgID, "task-1")
	h.Set(spool.HeaderMaxRetries, "4")
	h.Set(spool.HeaderTraceParent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.Set("X-Tenant", "acme")
	return &consumer.Task{
		ID:          "task-1",
		Type:        "billing.charge",
		Priority:    spool.High,
		Payload:     []byte(`{"amount":42}`),
		Headers:     h,
		Attempt:     2,
		MaxAttempts: 5,
		EnqueuedAt:  time.Now(),
	}
}

func remoteCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestHandlerReplies(t *testing.T) {
	t.Parallel()
	url := remoteServer(t)
	nc := remoteConnect(t, url)

	reply := func(hdr map[string]string, body string) func(m *nats.Msg) {
		return func(m *nats.Msg) {
			r := nats.NewMsg(m.Reply)
			for k, v := range hdr {
				r.Header.Set(k, v)
			}
			r.Data = []byte(body)
			if err := m.RespondMsg(r); err != nil {
				t.Errorf("responding: %v", err)
			}
		}
	}
	tests := []struct {
		name          string
		responder     func(m *nats.Msg)
		want          string
		wantErr       bool
		wantPermanent bool
		wantMessage   string
	}{
		{name: "success", responder: reply(nil, `{"charged":true}`), want: `{"charged":true}`},
		{name: "empty success", responder: reply(nil, ""), want: ""},
		{name: "retryable", responder: reply(map[string]string{"Spool-Error": "card declined, try later"}, "ignored"),
			wantErr: true, wantMessage: "card declined, try later"},
		{name: "permanent", responder: reply(map[string]string{"Spool-Error": "no such account", "Spool-Permanent": "true"}, ""),
			wantErr: true, wantPermanent: true, wantMessage: "no such account"},
		{name: "permanent false is retryable", responder: reply(map[string]string{"Spool-Error": "busy", "Spool-Permanent": "false"}, ""),
			wantErr: true, wantMessage: "busy"},
		{name: "lower-case header names", responder: reply(map[string]string{"spool-error": "gone", "spool-permanent": "TRUE"}, ""),
			wantErr: true, wantPermanent: true, wantMessage: "gone"},
		{name: "empty error message", responder: reply(map[string]string{"Spool-Error": ""}, ""),
			wantErr: true, wantMessage: "failed without a Spool-Error message"},
		{name: "permanent alone", responder: reply(map[string]string{"Spool-Permanent": "1"}, "x"),
			wantErr: true, wantPermanent: true, wantMessage: "failed without a Spool-Error message"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			subject := "remote.replies." + string(rune('a'+i))
			remoteRespond(t, url, subject, tt.responder)
			h := remote.Handler(nc, subject, remote.WithLogger(remoteLogger(t)))

			out, err := h.ProcessTask(remoteCtx(t, 10*time.Second), remoteTask())
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("ProcessTask: %v", err)
				}
				if string(out) != tt.want {
					t.Fatalf("result = %q, want %q", out, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ProcessTask returned %q and no error", out)
			}
			if out != nil {
				t.Errorf("result = %q on failure, want nil", out)
			}
			if got := consumer.IsPermanent(err); got != tt.wantPermanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, got, tt.wantPermanent)
			}
			var rerr *remote.Error
			if !errors.As(err, &rerr) {
				t.Fatalf("error %v (%T) is not a *remote.Error", err, err)
			}
			if rerr.Message != tt.wantMessage || rerr.Subject != subject {
				t.Errorf("remote.Error = %+v, want message %q on %q", rerr, tt.wantMessage, subject)
			}
		})
	}
}

func TestHandlerPassesHeaders(t *testing.T) {
	t.Parallel()
	url := remoteServer(t)
	nc := remoteConnect(t, url)
	seen := make(chan *nats.Msg, 1)
	remoteRespond(t, url, "remote.headers", func(m *nats.Msg) {
		seen <- m
		if err := m.Respond([]byte("ok")); err != nil {
			t.Errorf("responding: %v", err)
		}
	})

	task := remoteTask()
	task.Headers.Set("spool-attempt", "99") // a publisher's stray spelling must not survive
	before := task.Headers.Get("X-Tenant")
	ctx := remoteCtx(t, 10*time.Second)
	deadline, _ := ctx.Deadline()
	if _, err := remote.Handler(nc, "remote.headers").ProcessTask(ctx, task); err != nil {
		t.Fatalf("ProcessTask: %v", err)
	}
	m := <-seen

	if string(m.Data) != `{"amount":42}` {
		t.Errorf("request body = %q, want the payload", m.Data)
	}
	want := map[string]string{
		"Spool-Task-Id":      "task-1",
		"Spool-Task-Type":    "billing.charge",
		"Spool-Priority":     "high",
		"Spool-Attempt":      "2",
		"Spool-Max-Attempts": "5",
		"Spool-Max-Retries":  "4",
		"X-Tenant":           "acme",
		"Nats-Msg-Id":        "task-1",
		"traceparent":        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"Spool-Deadline":     deadline.UTC().Format(time.RFC3339Nano),
	}
	for k, v := range want {
		if got := m.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("request header %s = %q, want [%q]", k, got, v)
		}
	}
	if _, ok := m.Header["spool-attempt"]; ok {
		t.Errorf("request kept the publisher's spool-attempt header: %v", m.Header)
	}
	if task.Headers.Get("X-Tenant") != before || task.Headers.Get("Spool-Task-Type") != "" {
		t.Errorf("task headers were modified: %v", task.Headers)
	}
}

func TestHandlerNoResponders(t *testing.T) {
	t.Parallel()
	nc := remoteConnect(t, remoteServer(t))
	h := remote.Handler(nc, "remote.nobody")

	_, err := h.ProcessTask(remoteCtx(t, 10*time.Second), remoteTask())
	if err == nil {
		t.Fatal("ProcessTask succeeded with nobody listening")
	}
	if !errors.Is(err, remote.ErrNoResponders) || !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("error %v does not match remote.ErrNoResponders and nats.ErrNoResponders", err)
	}
	if consumer.IsPermanent(err) {
		t.Errorf("no responders must be retryable, got permanent %v", err)
	}
	if want := `no remote handler is listening on "remote.nobody"`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

func TestHandlerDeadline(t *testing.T) {
	t.Parallel()
	url := remoteServer(t)
	nc := remoteConnect(t, url)
	got := make(chan struct{})
	release := make(chan struct{})
	remoteRespond(t, url, "remote.slow", func(m *nats.Msg) {
		close(got)
		<-release // answers only after the caller gave up
		_ = m.Respond([]byte("too late"))
	})
	t.Cleanup(func() { close(release) })

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	out, err := remote.Handler(nc, "remote.slow").ProcessTask(ctx, remoteTask())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ProcessTask = %q, %v; want context.DeadlineExceeded", out, err)
	}
	if consumer.IsPermanent(err) {
		t.Errorf("a timeout must not be permanent: %v", err)
	}
	select {
	case <-got:
	default:
		t.Error("the responder never received the request")
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("ProcessTask returned after %s, long past the 300ms deadline", elapsed)
	}
}

func TestHandlerDefaultTimeout(t *testing.T) {
	t.Parallel()
	url := remoteServer(t)
	nc := remoteConnect(t, url)
	release := make(chan struct{})
	remoteRespond(t, url, "remote.nodeadline", func(m *nats.Msg) { <-release })
	t.Cleanup(func() { close(release) })

	// No deadline on the context: the handler's own timeout bounds the call.
	h := remote.Handler(nc, "remote.nodeadline", remote.WithTimeout(200*time.Millisecond))
	if _, err := h.ProcessTask(t.Context(), remoteTask()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ProcessTask without a deadline: %v, want context.DeadlineExceeded", err)
	}
}

func TestHandlerCanceled(t *testing.T) {
	t.Parallel()
	nc := remoteConnect(t, remoteServer(t))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := remote.Handler(nc, "remote.canceled").ProcessTask(ctx, remoteTask()); !errors.Is(err, context.Canceled) {
		t.Fatalf("ProcessTask on a canceled context: %v, want context.Canceled", err)
	}
}

func TestHandlerRejectsBadSubject(t *testing.T) {
	t.Parallel()
	nc := remoteConnect(t, remoteServer(t))
	for _, subject := range []string{"", "a.*", "a.>", "a..b", "a b", ".a"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Handler(%q) did not panic", subject)
				}
			}()
			remote.Handler(nc, subject)
		}()
	}
}
