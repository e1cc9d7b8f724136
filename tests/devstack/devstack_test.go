package devstack_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/tests/devstack"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStackProvisionsAndRestarts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	store := t.TempDir()
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))

	st, err := devstack.Start(ctx, devstack.Options{StoreDir: store, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(st.URL)
	if err != nil {
		st.Stop()
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "spool.tasks.normal.demo.echo", []byte("kept")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	nc.Close()
	st.Stop()

	// Starting again on the same store keeps the queued task and re-provisions cleanly.
	st, err = devstack.Start(ctx, devstack.Options{StoreDir: store, Logger: logger})
	if err != nil {
		t.Fatalf("restart on the same store: %v", err)
	}
	t.Cleanup(st.Stop)
	nc, err = nats.Connect(st.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err = jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := spool.DefaultNames()
	s, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("task stream holds %d messages after a restart, want 1", n)
	}
	for _, b := range []string{names.ResultsBucket(), names.UniqueBucket()} {
		if _, err := js.KeyValue(ctx, b); err != nil {
			t.Errorf("bucket %s: %v", b, err)
		}
	}
}

// A second stack on a running stack's store fails at once and leaves the
// store alone; once the first stops, the store is free again.
func TestSecondStackOnTheSameStoreFailsAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	store := t.TempDir()
	first, err := devstack.Start(ctx, devstack.Options{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	second, err := devstack.Start(ctx, devstack.Options{StoreDir: store})
	if err == nil {
		second.Stop()
		first.Stop()
		t.Fatal("a second stack started on the same store")
	}
	if !errors.Is(err, devstack.ErrStoreInUse) || !strings.Contains(err.Error(), fmt.Sprintf("in use by another spool-dev (pid %d)", os.Getpid())) {
		t.Errorf("error %q does not say the store is in use by this process", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the second stack took %s to fail", took)
	}
	first.Stop()
	again, err := devstack.Start(ctx, devstack.Options{StoreDir: store})
	if err != nil {
		t.Fatalf("the store stayed locked after Stop: %v", err)
	}
	again.Stop()
}
