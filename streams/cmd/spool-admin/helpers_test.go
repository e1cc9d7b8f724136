package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/streams/embedded"
)

// startAdmin starts an embedded server owned by t and returns its URL and a
// function running spool-admin against it, logging what it printed.
func startAdmin(t *testing.T) (string, func(args ...string) (string, error)) {
	t.Helper()
	s, err := embedded.Start(embedded.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	url := s.ClientURL()
	return url, func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(t.Context(), append(args, "--url", url), &out, &errOut)
		t.Logf("spool-admin %s\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
		return out.String(), err
	}
}

func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
