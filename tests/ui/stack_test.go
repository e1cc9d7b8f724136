package ui_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/tests/devstack"
)

// startStack starts a dev stack of its own (server, a worker with slots
// slots, the broker with the token), stopped when the test ends.
func startStack(t *testing.T, ctx context.Context, slots int) *devstack.Stack {
	t.Helper()
	st, err := devstack.Start(ctx, devstack.Options{
		StoreDir:      t.TempDir(),
		Logger:        slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Worker:        true,
		WorkerOptions: []consumer.Option{consumer.WithConcurrency(slots, slots)},
		BrokerAddr:    "127.0.0.1:0",
		BrokerToken:   token,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	return st
}

// logIn opens the dashboard of the broker at brokerURL and gives it the
// token.
func (b *browser) logIn(brokerURL string) {
	b.do("loading /ui", 15*time.Second,
		chromedp.Navigate(brokerURL+"/ui"),
		chromedp.WaitVisible(chromedp.CSS("#token-form")),
		chromedp.SendKeys(chromedp.CSS("#token-input"), token),
		press(`#token-form button[type="submit"]`),
	)
}
