package metrics

import (
	"encoding/json"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/consumer"
)

// Healthz answers GET /healthz: 200 while w has not stopped, 503 after,
// with {"status","worker"}.
func Healthz(w *consumer.Worker) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		st := w.State()
		status := http.StatusOK
		if st == consumer.WorkerStopped {
			status = http.StatusServiceUnavailable
		}
		writeHealth(rw, status, map[string]any{"status": http.StatusText(status), "worker": string(st)})
	})
}

// Readyz answers GET /readyz: 200 while nc is connected and w is pulling
// (idle or busy), 503 during start-up and shutdown, with
// {"status","worker","nats"}.
func Readyz(w *consumer.Worker, nc *nats.Conn) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		st := w.State()
		status := http.StatusOK
		if !nc.IsConnected() || (st != consumer.WorkerIdle && st != consumer.WorkerBusy) {
			status = http.StatusServiceUnavailable
		}
		writeHealth(rw, status, map[string]any{"status": http.StatusText(status), "worker": string(st), "nats": nc.Status().String()})
	})
}

func writeHealth(rw http.ResponseWriter, status int, body map[string]any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(body) // the prober may be gone
}
