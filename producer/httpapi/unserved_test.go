package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spoolq/spool/producer/httpapi"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/embedded"
	"github.com/spoolq/spool/streams/streamstest"
)

// Where workers pull by type, a task whose type no worker serves is
// enqueued with a warning in the answer (single and batch), and the
// overview and /metrics show the type with its queued tasks and oldest
// wait; a served type gets no warning and is not listed.
func TestUnservedTypeByType(t *testing.T) {
	t.Parallel()
	b := startBrokerWith(t, embedded.Options{}, streams.Settings{Consumers: streams.ConsumersByType},
		httpapi.Options{Registry: prometheus.NewPedanticRegistry()})
	// What a worker serving report.* does: make its consumer.
	ctx := ctxFor(t)
	cfg := streams.TypeConsumerConfig(spool.DefaultNames(), b.tasks.CachedInfo().Config, spool.Normal, "report.*")
	if _, err := b.tasks.CreateConsumer(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	r := b.do(t, "POST", "/v1/tasks", "", []byte(`{"type":"mail.send","priority":"high"}`))
	if r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.body)
	}
	got := decode[struct {
		ID      string `json:"id"`
		Warning string `json:"warning"`
	}](t, r)
	if !strings.Contains(got.Warning, `no worker serves type "mail.send" (workers serve report.*)`) || got.ID == "" {
		t.Errorf("unserved type answered %s", r.body)
	}
	r = b.do(t, "POST", "/v1/tasks", "", []byte(`{"type":"report.daily"}`))
	if r.status != 201 || strings.Contains(string(r.body), "warning") {
		t.Errorf("served type answered %d %s", r.status, r.body)
	}
	r = b.do(t, "POST", "/v1/tasks/batch", "", []byte(`{"tasks":[{"type":"report.weekly"},{"type":"mail.send","priority":"high"}]}`))
	batch := decode[struct {
		Results []struct {
			Warning string `json:"warning"`
		} `json:"results"`
	}](t, r)
	if r.status != 200 || len(batch.Results) != 2 || batch.Results[0].Warning != "" || !strings.Contains(batch.Results[1].Warning, `"mail.send"`) {
		t.Errorf("batch answered %d %s", r.status, r.body)
	}

	// The overview is cached for OverviewCacheTTL and the metrics' status
	// for StatusCacheTTL: wait for both tasks.
	streamstest.WaitFor(t, 10*time.Second, func() error {
		ov := decode[struct {
			Consumers string `json:"consumers"`
			Unserved  []struct {
				Type       string `json:"type"`
				Priority   string `json:"priority"`
				Queued     uint64 `json:"queued"`
				OldestWait int64  `json:"oldest_wait_ns"`
			} `json:"unserved"`
		}](t, b.do(t, "GET", "/v1/overview", "", nil))
		if ov.Consumers != "type" || len(ov.Unserved) != 1 {
			return fmt.Errorf("overview: consumers %q, unserved %+v", ov.Consumers, ov.Unserved)
		}
		if u := ov.Unserved[0]; u.Type != "mail.send" || u.Priority != "high" || u.Queued != 2 || u.OldestWait <= 0 {
			return fmt.Errorf("overview unserved %+v", u)
		}
		body := string(b.do(t, "GET", "/metrics", "", nil).body)
		for _, want := range []string{
			`spool_queue_unserved{priority="high",type="mail.send"} 2`,
			`spool_queue_unserved_oldest_wait_seconds{priority="high",type="mail.send"} `,
		} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		if strings.Contains(body, `type="report.`) {
			return fmt.Errorf("/metrics lists a served type:\n%s", body)
		}
		return nil
	})
}
