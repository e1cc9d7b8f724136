package conformance_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// setup is one server setup the suite runs against: how to start its
// server(s), and the topology settings every behaviour provisions.
type setup struct {
	name     string
	settings streams.Settings
	start    func(t *testing.T, s streams.Settings) *streamstest.Env
}

func single(t *testing.T, s streams.Settings) *streamstest.Env { return streamstest.Start(t, s) }

func cluster(t *testing.T, s streams.Settings) *streamstest.Env {
	return streamstest.StartCluster(t, 3, s)
}

// setups are the supported setups: file and memory storage on one server,
// and file storage replicated three times on a 3-node cluster.
var setups = []setup{
	{"file", streams.Settings{Storage: "file"}, single},
	{"memory", streams.Settings{Storage: "memory"}, single},
	{"cluster-r3", streams.Settings{Storage: "file", Replicas: 3}, cluster},
}

// behaviour is one core behaviour, run on a stack of its own. tune, when
// set, adjusts the setup's topology settings for it.
type behaviour struct {
	name string
	run  func(t *testing.T, s *stack)
	tune func(*streams.Settings)
}

var behaviours = []behaviour{
	{"completes", testCompletes, nil},
	{"retries-then-completes", testRetriesThenCompletes, nil},
	{"exhausted-retries-dead-letter", testExhaustedRetries, nil},
	{"permanent-dead-letters-at-once", testPermanent, nil},
	{"crashes-exhaust-deliveries-router-dead-letters", testMaxDeliver, func(s *streams.Settings) {
		s.AckWait, s.MaxDeliver = time.Second, 2
	}},
	{"delayed-runs-no-earlier", testDelayed, nil},
	{"unique-key-refuses-second", testUnique, nil},
	{"priorities-both-served", testPriorities, nil},
	{"graceful-stop-hands-back", testGracefulStop, nil},
	{"discarded-result-completes-without-document", testDiscardedResult, nil},
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, su := range setups {
		t.Run(su.name, func(t *testing.T) {
			t.Parallel()
			env := su.start(t, su.settings)
			for i, b := range behaviours {
				t.Run(b.name, func(t *testing.T) {
					t.Parallel()
					settings := su.settings
					if b.tune != nil {
						b.tune(&settings)
					}
					b.run(t, newStack(t, env, settings, "c"+strconv.Itoa(i)))
				})
			}
		})
	}
}
