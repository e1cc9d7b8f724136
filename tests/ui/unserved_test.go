package ui_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/tests/devstack"
)

// Where workers pull by type, the queues panel lists the queued task types
// no worker serves with their count and oldest wait, and leaves out the
// types the dev stack's worker serves.
func TestDashboardUnservedTypes(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		StoreDir:      t.TempDir(),
		Settings:      streams.Settings{Consumers: streams.ConsumersByType},
		Logger:        slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Worker:        true,
		WorkerOptions: []consumer.Option{consumer.WithConcurrency(2, 2)},
		BrokerAddr:    "127.0.0.1:0",
		BrokerToken:   token,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	b := startBrowser(t)
	b.logIn(st.BrokerURL)
	b.waitJS("the page to go live", `document.querySelector("#conn").textContent === "live"`, 10*time.Second)
	b.waitJS("the empty unserved list", `!document.querySelector("#unserved").hidden && !document.querySelector("#unserved-empty").hidden`, 10*time.Second)

	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"ui.unserved","priority":"low"}`)
	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"ui.unserved","priority":"low"}`)
	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"demo.echo","payload":{}}`)
	row := `document.querySelector('#unserved-table tr[data-type="ui.unserved"][data-priority="low"]')`
	b.waitJS("the unserved type with its tasks", row+` !== null && `+numberIn(`#unserved-table tr[data-type="ui.unserved"] .queued`)+` === 2 && `+row+`.querySelector(".oldest").textContent !== "—"`, 10*time.Second)
	if n := eval[int](b, `document.querySelectorAll("#unserved-table tbody tr").length`); n != 1 {
		t.Errorf("%d unserved rows, want ui.unserved only", n)
	}
	if hidden := eval[bool](b, `document.querySelector("#unserved-empty").hidden`); !hidden {
		t.Error("the empty note shows beside an unserved type")
	}
}
