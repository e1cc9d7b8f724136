// Command spool-dev runs Spool's development stack in the foreground (make
// run): an embedded JetStream server with its store in .data/, the topology
// provisioned, a worker with the demo handlers and the DLQ router (metrics
// and health on 127.0.0.1:9090), and the HTTP broker with the dashboard on
// 127.0.0.1:8080. Ctrl-C stops it gracefully.
//
// It reads the same SPOOL_ variables as the other binaries, so one
// environment moves the stack and points the CLIs at it: the server listens
// where SPOOL_NATS_URL points, the broker on SPOOL_HTTP_ADDR, the metrics on
// SPOOL_METRICS_ADDR; SPOOL_DEV_STORE names the store. Flags override them.
// Its banner prints the shell block that points another terminal at the
// stack: SPOOL_NATS_URL, NATS_URL for the nats CLI, SPOOL_HTTP_ADDR for curl,
// and bin/ on PATH.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spoolq/spool/shared/cli"
	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/shared/logging"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/tests/devstack"
)

// off turns the broker or the metrics listener off.
const off = "off"

// Config is the dev stack's configuration: the common SPOOL_ settings, the
// topology settings and where each part listens.
type Config struct {
	config.Common
	streams.Settings
	// HTTPAddr is the broker's listen address; off: no broker.
	// SPOOL_HTTP_ADDR, default 127.0.0.1:8080.
	HTTPAddr string `envconfig:"HTTP_ADDR" default:"127.0.0.1:8080" desc:"the broker and dashboard listen address (off: none)"`
	// HTTPToken, when set, is the bearer token the broker requires.
	// SPOOL_HTTP_TOKEN, default none.
	HTTPToken string `envconfig:"HTTP_TOKEN" desc:"bearer token the broker requires (empty: none)"`
	// MetricsAddr is where the worker's /metrics, /healthz and /readyz are
	// served; off: nowhere. SPOOL_METRICS_ADDR, default 127.0.0.1:9090.
	MetricsAddr string `envconfig:"METRICS_ADDR" default:"127.0.0.1:9090" desc:"the worker's /metrics, /healthz, /readyz listen address (off: none)"`
	// Store is the JetStream store directory. SPOOL_DEV_STORE, default
	// .data/nats.
	Store string `envconfig:"DEV_STORE" default:".data/nats" desc:"JetStream store directory"`

	host string // from SPOOL_NATS_URL
	port int
}

// Validate checks every part and splits SPOOL_NATS_URL into the host and
// port the server listens on.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if err := c.Settings.Validate(); err != nil {
		return err
	}
	var err error
	if c.host, c.port, err = listenURL(c.URL); err != nil {
		return fmt.Errorf("SPOOL_NATS_URL: %w", err)
	}
	for name, addr := range map[string]string{"SPOOL_HTTP_ADDR": c.HTTPAddr, "SPOOL_METRICS_ADDR": c.MetricsAddr} {
		if err := checkAddr(addr); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if c.Store == "" {
		return errors.New("SPOOL_DEV_STORE: must not be empty")
	}
	return nil
}

// listenURL is the host and port of a single nats://host:port URL.
func listenURL(s string) (string, int, error) {
	if strings.Contains(s, ",") {
		return "", 0, fmt.Errorf("%q: the dev stack listens on one URL, not a list", s)
	}
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Scheme != "nats" || u.Hostname() == "" {
		return "", 0, fmt.Errorf("%q is not nats://host:port", s)
	}
	port := 4222
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port < 0 || port > 65535 {
			return "", 0, fmt.Errorf("%q: port %q must be 0 to 65535", s, p)
		}
	}
	return u.Hostname(), port, nil
}

// checkAddr accepts host:port or off.
func checkAddr(addr string) error {
	if addr == off {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port or off", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q must be 0 to 65535", addr, port)
	}
	return nil
}

const usage = `usage: spool-dev [flags]

Runs the development stack in the foreground: an embedded JetStream server, the
topology provisioned, a worker with the demo handlers (demo.echo returns its payload,
demo.sleep sleeps {"ms":N}, demo.fail fails the first {"fail_times":N} attempts,
demo.progress reports progress over {"steps":N,"ms":M} steps of M ms) and the DLQ
router, and the HTTP broker with the dashboard at /ui. Ctrl-C stops it.

It reads the SPOOL_ variables the other binaries read, so one environment moves the
stack and points the CLIs at it:

  SPOOL_NATS_URL=nats://127.0.0.1:4333 SPOOL_HTTP_ADDR=127.0.0.1:8181 \
    SPOOL_METRICS_ADDR=127.0.0.1:9191 SPOOL_DEV_STORE=.data/second make run

The flags override the variables.

flags:
`

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(cli.Exit(os.Stderr, "spool-dev", err))
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("spool-dev")
	store := fs.String("store", "", "JetStream store `directory` (default: SPOOL_DEV_STORE, .data/nats)")
	host := fs.String("host", "", "NATS listen `host` (default: the host of SPOOL_NATS_URL, 127.0.0.1)")
	port := fs.Int("port", -1, "NATS client `port`, 0 picks a free one (default: the port of SPOOL_NATS_URL, 4222)")
	syncAlways := fs.Bool("sync-always", false, "fsync every write before acknowledging (durable, slower)")
	brokerAddr := fs.String("broker", "", "HTTP broker and dashboard listen `address`, off: none (default: SPOOL_HTTP_ADDR, 127.0.0.1:8080)")
	worker := fs.Bool("worker", true, "run a worker with the demo handlers and the DLQ router (--worker=false: none)")
	metricsAddr := fs.String("metrics", "", "the worker's /metrics, /healthz and /readyz listen `address`, off: none (default: SPOOL_METRICS_ADDR, 127.0.0.1:9090)")
	if err := cli.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			cli.PrintFlags(stdout, fs)
			fmt.Fprintf(stdout, "\nenvironment:\n%s", config.Usage(&Config{}))
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("spool-dev takes no arguments, got %q (spool-dev --help lists the flags)", fs.Args())
	}
	var cfg Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	// The flags win over the variables.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["store"] {
		cfg.Store = *store
	}
	if set["host"] {
		cfg.host = *host
	}
	if set["port"] {
		if *port < 0 || *port > 65535 {
			return fmt.Errorf("--port: %d must be 0 to 65535", *port)
		}
		cfg.port = *port
	}
	for name, p := range map[string]struct {
		flag string
		dst  *string
	}{"broker": {*brokerAddr, &cfg.HTTPAddr}, "metrics": {*metricsAddr, &cfg.MetricsAddr}} {
		if !set[name] {
			continue
		}
		if p.flag == "" {
			p.flag = off // the empty value turned them off before "off" did
		}
		if err := checkAddr(p.flag); err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
		*p.dst = p.flag
	}
	logger, err := logging.New(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	for _, w := range config.Warnings(os.Environ()) {
		logger.Warn(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	st, err := devstack.Start(ctx, devstack.Options{
		Host: cfg.host, Port: cfg.port, StoreDir: cfg.Store, SyncAlways: *syncAlways,
		Names: cfg.Names(), Settings: cfg.Settings, Logger: logger,
		Worker: *worker, BrokerAddr: orEmpty(cfg.HTTPAddr), BrokerToken: cfg.HTTPToken, MetricsAddr: orEmpty(cfg.MetricsAddr),
	})
	if err != nil {
		return err
	}
	defer st.Stop()
	printBanner(stdout, st, cfg.Store)
	<-ctx.Done()
	logger.Info("stopping the dev stack")
	return nil
}

// orEmpty maps off to the empty address devstack takes for "none".
func orEmpty(addr string) string {
	if addr == off {
		return ""
	}
	return addr
}

func printBanner(w io.Writer, st *devstack.Stack, store string) {
	n := st.Names
	fmt.Fprintf(w, "\nSpool dev stack running\n")
	fmt.Fprintf(w, "  NATS (JetStream)  %s   store %s\n", st.URL, store)
	fmt.Fprintf(w, "  topology          %s, %s, %s; KV %s, %s, %s, %s, %s, %s, %s\n",
		n.TaskStream(), n.DLQStream(), n.AdvisoryStream(), n.ResultsBucket(), n.UniqueBucket(),
		n.CancelBucket(), n.PausedBucket(), n.LimitsBucket(), n.LeasesBucket(), n.WorkflowsBucket())
	if st.Worker != nil {
		fmt.Fprintf(w, "  worker            demo.echo, demo.sleep, demo.fail, demo.progress; DLQ router; NATS service spool-consumer\n")
	}
	if st.MetricsURL != "" {
		base := strings.TrimSuffix(st.MetricsURL, "/metrics")
		fmt.Fprintf(w, "  worker metrics    %s   (health at %s/healthz, %s/readyz)\n", st.MetricsURL, base, base)
	}
	if st.BrokerURL != "" {
		fmt.Fprintf(w, "  HTTP broker       %s   (dashboard at %s/ui/, OpenAPI at %s/v1/openapi.json)\n", st.BrokerURL, st.BrokerURL, st.BrokerURL)
	}
	fmt.Fprintf(w, "\nIn another terminal, from this directory, paste this to point the spool commands,\nnats and curl at this stack:\n\n%s\n", envBlock(st))
	if st.BrokerURL != "" {
		fmt.Fprint(w, `
  Enqueue:  curl -s $SPOOL_HTTP_ADDR/v1/tasks -d '{"id":"hello-1","type":"demo.echo","payload":{"hello":"world"}}'
  Result:   curl -s "$SPOOL_HTTP_ADDR/v1/tasks/hello-1?wait=5s"
  Failing:  curl -s $SPOOL_HTTP_ADDR/v1/tasks -d '{"id":"fail-1","type":"demo.fail","payload":{"fail_times":9},"max_retries":1}'
  Progress: curl -s $SPOOL_HTTP_ADDR/v1/tasks -d '{"id":"progress-1","type":"demo.progress","payload":{"steps":20}}'
`)
		fmt.Fprintf(w, "            and watch it at %s/ui/#task=progress-1\n", st.BrokerURL)
	}
	fmt.Fprint(w, `  Status:   spool-admin status
  DLQ:      spool-admin dlq list
  Raw:      nats pub spool.tasks.normal.demo.echo 'hello' -H Spool-Task-Id:t1   (nats: make tools)
  Inspect:  nats stream ls -a  ·  nats kv get spool_results t1  ·  nats micro info spool-consumer

Ctrl-C stops everything gracefully.
`)
}

// envBlock is the shell block that points a terminal at the stack: the
// variables the spool commands, nats and the README's curl commands read,
// and the bin/ directory make run builds into on PATH.
func envBlock(st *devstack.Stack) string {
	bin, err := filepath.Abs("bin")
	if err != nil {
		bin = "bin"
	}
	vars := fmt.Sprintf("export SPOOL_NATS_URL=%s NATS_URL=%s", st.URL, st.URL)
	if st.BrokerURL != "" {
		vars += " SPOOL_HTTP_ADDR=" + strings.TrimPrefix(st.BrokerURL, "http://")
	}
	return fmt.Sprintf("%s \\\n  PATH=%s:\"$PATH\"", vars, shellQuote(bin))
}

// shellQuote quotes s for a POSIX shell when it holds anything but the
// characters of a plain path.
func shellQuote(s string) string {
	if strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '+' || r == ':' ||
			('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
