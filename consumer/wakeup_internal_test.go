package consumer

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A worker watches only where its connection may subscribe: a refused
// subscription is seen at once, so the worker keeps its long-polls.
func TestMayWatchSeesARefusedSubscription(t *testing.T) {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "worker", Password: "secret", Permissions: &server.Permissions{
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "spool.tasks.*.mine"}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("worker", "secret"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if !mayWatch(nc, "spool.tasks.high.mine", 10*time.Second) {
		t.Error("an allowed subscription was seen as refused")
	}
	if mayWatch(nc, "spool.tasks.high.other", 10*time.Second) {
		t.Error("a refused subscription was seen as allowed")
	}
}

func TestPublishSubjects(t *testing.T) {
	plain := jetstream.StreamConfig{Subjects: []string{"spool.tasks.high.>", "spool.sched.>"}}
	part0 := plain
	part0.Subjects = append(slices.Clone(plain.Subjects), "spool.part.0.tasks.>")
	part0.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "spool.part.0.tasks.>", Destination: "spool.tasks.>"}
	part2 := jetstream.StreamConfig{
		Subjects:         []string{"spool.part.2.tasks.>"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "spool.part.2.tasks.>", Destination: "spool.tasks.>"},
	}
	for _, tt := range []struct {
		name    string
		stream  jetstream.StreamConfig
		filters []string
		want    []string
	}{
		{"plain", plain, []string{"spool.tasks.high.email.*", ""}, []string{"spool.tasks.high.email.*"}},
		{"priority", plain, []string{"spool.tasks.high.>"}, []string{"spool.tasks.high.>"}},
		{"not the stream's", plain, []string{"spool.tasks.low.x"}, nil},
		{"partition 0", part0, []string{"spool.tasks.high.x"}, []string{"spool.tasks.high.x", "spool.part.0.tasks.high.x"}},
		{"partition 2", part2, []string{"spool.tasks.high.x"}, []string{"spool.part.2.tasks.high.x"}},
	} {
		if got := publishSubjects(tt.stream, tt.filters); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
