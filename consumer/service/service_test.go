package service_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/service"
	"github.com/spoolq/spool/shared/fleet"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestSubject(t *testing.T) {
	t.Parallel()
	if got, want := service.Subject("spool", "host 1.a", "ID9"), "spool.svc.consumer.host_1_a.ID9.stats"; got != want {
		t.Errorf("Subject = %q, want %q", got, want)
	}
}

// The stats endpoint answers with the worker's figures in the fleet types,
// and the service info names the worker and the prefix.
func TestAdd(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	w, err := consumer.New(e.NC, consumer.NewMux(), consumer.WithNames(e.Names), consumer.WithWorkerName("svc-worker"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := service.Add(e.NC, w, service.WithVersion("not semver")); !errors.Is(err, consumer.ErrInvalidOption) {
		t.Errorf("Add with a bad version = %v, want ErrInvalidOption", err)
	}
	svc, err := service.Add(e.NC, w, service.WithVersion("1.2.3"), service.WithMetadata(map[string]string{"metrics_addr": "x:1"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Stop(); err != nil {
			t.Error(err)
		}
	})
	info := svc.Info()
	if info.Name != fleet.ServiceName || info.Version != "1.2.3" || info.Metadata["worker"] != "svc-worker" ||
		info.Metadata["prefix"] != e.Names.Prefix() || info.Metadata["metrics_addr"] != "x:1" ||
		info.Metadata[fleet.MetadataConformance] != fleet.ConformanceFull {
		t.Errorf("service info %+v", info)
	}
	reply, err := e.NC.Request(service.Subject(e.Names.Prefix(), "svc-worker", info.ID), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats fleet.WorkerStats
	if err := json.Unmarshal(reply.Data, &stats); err != nil {
		t.Fatal(err)
	}
	if stats.Worker != "svc-worker" || stats.State != string(consumer.WorkerNew) || len(stats.Priorities) != 5 || stats.Router != nil {
		t.Errorf("stats %+v", stats)
	}
}
