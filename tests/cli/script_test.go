package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/spoolq/spool/streams/admin"
	"github.com/spoolq/spool/streams/embedded"
)

// TestScripts runs testdata/*.txtar. Each script gets its own embedded
// JetStream server (not provisioned) in $SPOOL_NATS_URL, and free ports
// for a dev stack in $NATS_PORT, $HTTP_PORT and $METRICS_PORT. Beside
// testscript's commands: http, waitfor and queueempty.
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata",
		RequireExplicitExec: true,
		Setup:               setupScript,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"http":       cmdHTTP,
			"waitfor":    cmdWaitFor,
			"queueempty": cmdQueueEmpty,
		},
	})
}

func setupScript(env *testscript.Env) error {
	env.Setenv("PATH", binDir+string(os.PathListSeparator)+env.Getenv("PATH"))
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(env.WorkDir, ".nats")})
	if err != nil {
		return err
	}
	env.Defer(func() { shutdown(srv) })
	env.Setenv("SPOOL_NATS_URL", srv.ClientURL())
	for _, name := range []string{"NATS_PORT", "HTTP_PORT", "METRICS_PORT"} {
		port, err := freePort()
		if err != nil {
			return err
		}
		env.Setenv(name, strconv.Itoa(port))
	}
	return nil
}

func shutdown(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// freePort is a TCP port nothing listens on at the moment.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// cmdHTTP is "http METHOD URL [BODY]": it sends the request and prints the
// status code and the body on stdout.
func cmdHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: http METHOD URL [BODY]")
	}
	var body io.Reader
	if len(args) == 3 {
		body = strings.NewReader(args[2])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, args[0], args[1], body)
	ts.Check(err)
	resp, err := http.DefaultClient.Do(req)
	if neg {
		if err == nil {
			resp.Body.Close()
			ts.Fatalf("request succeeded")
		}
		return
	}
	ts.Check(err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "%d\n%s", resp.StatusCode, b)
}

// cmdWaitFor is "waitfor URL": it polls GET URL until it answers 200, for
// at most 30 seconds.
func cmdWaitFor(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 || neg {
		ts.Fatalf("usage: waitfor URL")
	}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := get200(args[0])
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s not ready within 30s: %v", args[0], err)
		}
		<-tick.C
	}
}

// cmdQueueEmpty is "queueempty": it waits, for at most 30 seconds, until
// no task of $SPOOL_NATS_URL's default topology is queued or in flight. A
// worker's last acks are applied by the server after the worker exits, so
// a script that stopped its worker waits here before it relies on an
// empty queue.
func cmdQueueEmpty(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 0 || neg {
		ts.Fatalf("usage: queueempty")
	}
	nc, err := nats.Connect(ts.Getenv("SPOOL_NATS_URL"))
	ts.Check(err)
	defer nc.Close()
	adm, err := admin.New(nc)
	ts.Check(err)
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := adm.Status(ctx)
		cancel()
		var queued uint64
		for _, p := range st.Priorities {
			queued += p.Pending + uint64(p.InFlight)
		}
		if err == nil && queued == 0 {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("queue not empty within 30s: %d tasks queued or in flight (error: %v)", queued, err)
		}
		<-tick.C
	}
}

func get200(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
