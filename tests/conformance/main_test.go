package conformance_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, streamstest.ServerGoroutines()...)
}
