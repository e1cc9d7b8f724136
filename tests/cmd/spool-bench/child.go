package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/spoolq/spool/tests/devstack"
)

// childEnv marks a process started by the harness as one of its children:
// the first argument then names the role (server, consume).
const childEnv = "SPOOL_BENCH_CHILD"

// runChild runs a child role and returns the process exit code.
func runChild(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "spool-bench child: no role")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "server":
		err = serveChild(ctx, args[1:])
	case "consume":
		err = consumeChild(ctx, args[1:])
	case "node":
		err = nodeChild(ctx, args[1:])
	default:
		err = fmt.Errorf("unknown role %q", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spool-bench child:", err)
		return 1
	}
	return 0
}

// serveChild runs the JetStream server with the topology provisioned,
// prints its URL and serves until stdin closes.
func serveChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory")
	syncAlways := fs.Bool("sync", false, "SyncAlways")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := devstack.Start(ctx, devstack.Options{StoreDir: *dir, SyncAlways: *syncAlways, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("starting the server: %w", err)
	}
	defer st.Stop()
	fmt.Println(st.URL)
	done := make(chan struct{})
	go func() {
		serverCommands(os.Stdin, st.Server)
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// serverCommands reads the harness's commands from r until it closes:
// "profile <file>" starts a CPU profile of the server child, "stop" ends
// it (the processing scenario profiles the server over a consumer's
// measured window) and writes the server's traffic over the window to
// the file's name with .traffic in place of .pprof.
func serverCommands(r io.Reader, srv *server.Server) {
	sc := bufio.NewScanner(r)
	var prof *os.File
	var t0 traffic
	stop := func() {
		if prof != nil {
			pprof.StopCPUProfile()
			_ = prof.Close()
			name := strings.TrimSuffix(prof.Name(), ".pprof") + ".traffic"
			if err := os.WriteFile(name, readTraffic(srv).since(t0), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "spool-bench server: writing the traffic:", err)
			}
			prof = nil
		}
	}
	defer stop()
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "profile":
			stop()
			fh, err := os.Create(arg)
			if err != nil {
				fmt.Fprintln(os.Stderr, "spool-bench server: creating the profile:", err)
				continue
			}
			if err := pprof.StartCPUProfile(fh); err != nil {
				fmt.Fprintln(os.Stderr, "spool-bench server: starting the profile:", err)
				_ = fh.Close()
				continue
			}
			prof = fh
			t0 = readTraffic(srv)
		case "stop":
			stop()
		}
	}
}
