package security_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, streamstest.ServerGoroutines()...)
}

// deployDir holds the nats-server configurations under test.
var deployDir = filepath.Join("..", "..", "deploy", "nats")

// secretsFile is the file auth.conf includes for its password variables.
const secretsFile = "spool-secrets.conf"

// Roles of auth.conf, with the variable holding each password.
var roleVars = map[string]string{
	"sys":            "SPOOL_SYS_PASSWORD",
	"spool-admin":    "SPOOL_ADMIN_PASSWORD",
	"spool-producer": "SPOOL_PRODUCER_PASSWORD",
	"spool-broker":   "SPOOL_BROKER_PASSWORD",
	"spool-consumer": "SPOOL_CONSUMER_PASSWORD",
	"spool-handler":  "SPOOL_HANDLER_PASSWORD",
	// The example of a worker role per service.
	"spool-worker-billing": "SPOOL_WORKER_BILLING_PASSWORD",
}

// waitTimeout bounds every wait for a server reply or an async error.
const waitTimeout = 10 * time.Second

// copyConfigs copies deploy/nats/*.conf into a fresh directory, leaving out
// any local spool-secrets.conf, and returns the directory.
func copyConfigs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(deployDir, "*.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no *.conf in %s", deployDir)
	}
	for _, f := range files {
		if filepath.Base(f) == secretsFile {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// writeSecrets writes spool-secrets.conf into dir with a bcrypt hash of a
// fresh random password per role, and returns the plain passwords by user.
func writeSecrets(t *testing.T, dir string) map[string]string {
	t.Helper()
	passwords := map[string]string{}
	var b strings.Builder
	for user, variable := range roleVars {
		raw := make([]byte, 12)
		if _, err := rand.Read(raw); err != nil {
			t.Fatal(err)
		}
		pw := hex.EncodeToString(raw)
		hash, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		passwords[user] = pw
		fmt.Fprintf(&b, "%s: %q\n", variable, hash)
	}
	if err := os.WriteFile(filepath.Join(dir, secretsFile), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return passwords
}

// startFromConfig parses file with the server's own parser, moves it to a
// random loopback port and a temporary store, and starts it. The server is
// shut down when t ends.
func startFromConfig(t *testing.T, file string) *server.Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("parsing %s: %v", file, err)
	}
	opts.Host = "127.0.0.1"
	opts.Port = server.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir = t.TempDir()
	opts.NoSigs = true
	opts.NoLog = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server from %s: %v", file, err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(waitTimeout) {
		t.Fatalf("server from %s not ready after %s", file, waitTimeout)
	}
	return s
}

// authServer is a running single-auth.conf node with fresh passwords.
type authServer struct {
	url       string
	passwords map[string]string
}

// startAuth starts deploy/nats/single-auth.conf with generated secrets.
// With provision, the default topology is provisioned as spool-admin.
func startAuth(t *testing.T, provision bool) authServer {
	t.Helper()
	dir := copyConfigs(t)
	a := authServer{passwords: writeSecrets(t, dir)}
	a.url = startFromConfig(t, filepath.Join(dir, "single-auth.conf")).ClientURL()
	if provision {
		a.provision(t, streams.Settings{})
	}
	return a
}

// provision provisions the topology of settings as spool-admin.
func (a authServer) provision(t *testing.T, settings streams.Settings) {
	t.Helper()
	admin := a.connect(t, "spool-admin")
	if err := streams.Provision(testContext(t), admin.js, topologyOf(t, settings), testLogger(t)); err != nil {
		t.Fatalf("provisioning as spool-admin: %v", err)
	}
}

// topology is the default topology, as spool-admin provisions it: workers
// pull by type.
func topology(t *testing.T) streams.Topology {
	t.Helper()
	return topologyOf(t, streams.Settings{})
}

func topologyOf(t *testing.T, settings streams.Settings) streams.Topology {
	t.Helper()
	topo, err := streams.New(spool.DefaultNames(), settings)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// client is one authenticated connection whose async errors (permission
// violations among them) arrive on errs.
type client struct {
	user string
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

func (a authServer) connect(t *testing.T, user string) *client {
	t.Helper()
	pw, ok := a.passwords[user]
	if !ok {
		t.Fatalf("no password for user %q", user)
	}
	c := &client{user: user, errs: make(chan error, 64)}
	nc, err := nats.Connect(a.url,
		nats.Name("security-test-"+user),
		nats.UserInfo(user, pw),
		nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connecting as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.nc, c.js = nc, js
	return c
}

// waitViolation waits for a permissions violation whose text contains want,
// e.g. `Publish to "spool.dlq.high.x"`.
func (c *client) waitViolation(t *testing.T, want string) error {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), want) {
				return err
			}
			t.Logf("%s: other async error while waiting: %v", c.user, err)
		case <-deadline.C:
			t.Fatalf("%s: no permissions violation with %q after %s", c.user, want, waitTimeout)
			return nil
		}
	}
}

// noViolation fails if the server reported a permissions violation on c up
// to now. The flush round trip guarantees the server's -ERR for anything sent
// before it has been read.
func (c *client) noViolation(t *testing.T) {
	t.Helper()
	if err := c.nc.FlushTimeout(waitTimeout); err != nil {
		t.Fatalf("%s: flush: %v", c.user, err)
	}
	if err := c.nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("%s: unexpected %v", c.user, err)
	}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
