package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/streams"
)

// Config is spool-consumer's whole configuration, read from SPOOL_*
// variables once in main.
type Config struct {
	config.Common

	// Partition is the task partition this process pulls (see
	// docs/scaling.md): "all" pulls every partition of the topology under
	// one scheduler, a number 0 to 15 pins the process to that partition.
	// SPOOL_PARTITION, default all.
	Partition string `envconfig:"PARTITION" default:"all" desc:"task partitions pulled: all, or one partition 0 to SPOOL_PARTITIONS-1"`
	// ConcurrencyMin and ConcurrencyMax bound the worker slots; the pool
	// autoscales between them. SPOOL_CONCURRENCY_MIN default 1,
	// SPOOL_CONCURRENCY_MAX default 10.
	ConcurrencyMin int `envconfig:"CONCURRENCY_MIN" default:"1" desc:"fewest worker slots (autoscaling floor)"`
	ConcurrencyMax int `envconfig:"CONCURRENCY_MAX" default:"10" desc:"most worker slots (autoscaling ceiling)"`
	// Weights are the priority weights, "critical=1,high=0.7,...";
	// priorities left out keep their default. SPOOL_WEIGHTS, default
	// critical=1,high=0.7,normal=0.4,low=0.2,idle=0.1.
	Weights string `envconfig:"WEIGHTS" default:"critical=1,high=0.7,normal=0.4,low=0.2,idle=0.1" desc:"priority weights, <priority>=<weight>,..."`
	// Boost is the anti-starvation boost, "<age>=<factor>,..." with
	// increasing ages; empty turns it off. SPOOL_BOOST, default
	// 30s=1.5,60s=1.75,90s=2.
	Boost string `envconfig:"BOOST" default:"30s=1.5,60s=1.75,90s=2" desc:"anti-starvation boost by oldest wait, <age>=<factor>,... (empty: off)"`
	// Strict always serves the highest non-empty priority. SPOOL_STRICT,
	// default false.
	Strict bool `envconfig:"STRICT" default:"false" desc:"always serve the highest non-empty priority"`
	// RetryBase and RetryMax shape the backoff min(base·2^(attempt-1), max).
	// SPOOL_RETRY_BASE default 1s, SPOOL_RETRY_MAX default 5m.
	RetryBase time.Duration `envconfig:"RETRY_BASE" default:"1s" desc:"first retry delay; doubles per attempt"`
	RetryMax  time.Duration `envconfig:"RETRY_MAX" default:"5m" desc:"longest retry delay"`
	// RetryJitter adds up to this fraction of the backoff at random.
	// SPOOL_RETRY_JITTER, default 0.2.
	RetryJitter float64 `envconfig:"RETRY_JITTER" default:"0.2" desc:"random extra delay, fraction of the backoff"`
	// DefaultMaxRetries applies to tasks without Spool-Max-Retries.
	// SPOOL_DEFAULT_MAX_RETRIES, default 3.
	DefaultMaxRetries int `envconfig:"DEFAULT_MAX_RETRIES" default:"3" desc:"retries after the first attempt without Spool-Max-Retries"`
	// TaskTimeout is the per-attempt deadline for tasks without
	// Spool-Timeout. SPOOL_TASK_TIMEOUT, default 30m.
	TaskTimeout time.Duration `envconfig:"TASK_TIMEOUT" default:"30m" desc:"attempt deadline without Spool-Timeout"`
	// ShutdownTimeout bounds the whole stop after SIGINT/SIGTERM: running
	// handlers may finish for all of it but a tenth (at most 3s), which is
	// left to hand the tasks of those still running back; the process
	// exits when it ends, whether or not the server answers.
	// SPOOL_SHUTDOWN_TIMEOUT, default 30s.
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"30s" desc:"longest stop on SIGINT/SIGTERM: running handlers get all but a tenth of it (at most 3s), then their tasks are handed back"`
	// WorkerName names this process in results. SPOOL_WORKER_NAME, default
	// <hostname>-<pid>.
	WorkerName string `envconfig:"WORKER_NAME" desc:"name in result documents (default <hostname>-<pid>)"`
	// ScaleUpFill is the busy fraction at which the pool grows while tasks
	// wait. SPOOL_SCALE_UP_FILL, default 0.6.
	ScaleUpFill float64 `envconfig:"SCALE_UP_FILL" default:"0.6" desc:"busy fraction of the slots at which the pool grows while tasks wait"`
	// ScaleDownIdle is how long slots must go unused before the pool
	// shrinks. SPOOL_SCALE_DOWN_IDLE, default 2m.
	ScaleDownIdle time.Duration `envconfig:"SCALE_DOWN_IDLE" default:"2m" desc:"period after which unused slots are released"`
	// ProcessingDelay writes the "processing" result state only for
	// attempts still running after it (one result write less for short
	// tasks); 0 writes it for every attempt. SPOOL_PROCESSING_DELAY,
	// default 1s.
	ProcessingDelay time.Duration `envconfig:"PROCESSING_DELAY" default:"1s" desc:"write the processing state only for attempts running longer (0: as every attempt starts)"`
	// Events publishes task events (started, completed, dead, ...) for
	// subscribers on <prefix>.events.>; false saves their cost where
	// nobody watches. SPOOL_EVENTS, default true.
	Events bool `envconfig:"EVENTS" default:"true" desc:"publish task events on <prefix>.events.> (false: none, where nobody watches them)"`
	// DiscardResults are the task types whose completed results are not
	// kept (consumer.WithDiscardResults): comma-separated types or
	// patterns ("metrics.push,cache.*"). A task's Spool-Result header
	// wins. SPOOL_DISCARD_RESULTS, default none.
	DiscardResults string `envconfig:"DISCARD_RESULTS" desc:"task types or patterns whose completed results are not kept, comma-separated (default none)"`
	// StatsInterval is how often the one-line summary is logged; 0 turns it
	// off. SPOOL_STATS_INTERVAL, default 10s.
	StatsInterval time.Duration `envconfig:"STATS_INTERVAL" default:"10s" desc:"how often the one-line summary is logged (0: never)"`
	// DLQRouter runs the DLQ router beside the worker: it moves tasks that
	// ran out of deliveries (their worker crashed every time) to the
	// dead-letter stream. Several routers may run at once; turn it off only
	// where another process runs one. SPOOL_DLQ_ROUTER, default true.
	DLQRouter bool `envconfig:"DLQ_ROUTER" default:"true" desc:"also run the DLQ router for tasks that ran out of deliveries"`
	// UnservedDeadline is how long a task of a type no worker serves waits,
	// where workers pull by type, before the DLQ router dead-letters it
	// with reason unserved; 0 lets it wait for good.
	// SPOOL_UNSERVED_DEADLINE, default 168h (seven days).
	UnservedDeadline time.Duration `envconfig:"UNSERVED_DEADLINE" default:"168h" desc:"how long a task of a type no worker serves waits before the DLQ router dead-letters it (0: for good; pulling by type only)"`

	// MetricsAddr is where /metrics, /healthz and /readyz are served. Port 0
	// (the default) picks a free port, so several consumers on one host
	// start side by side; the address is logged and published in the NATS
	// service metadata (metrics_addr). "off" serves nothing.
	// SPOOL_METRICS_ADDR, default 127.0.0.1:0.
	MetricsAddr string `envconfig:"METRICS_ADDR" default:"127.0.0.1:0" desc:"listen address of /metrics, /healthz, /readyz (port 0: a free port, logged; off: none)"`

	// RemoteRoutes serves task types with remote handlers (any language,
	// over NATS request-reply): a comma-separated list of
	// <type-pattern>=<subject>[;concurrency=<n>][;timeout=<duration>], e.g.
	// "billing.>=spool.remote.billing;concurrency=8;timeout=30s,img.*=spool.remote.{type}".
	// Patterns match types as NATS subjects do (* one token, final > the
	// rest); {type} in a subject stands for the task type; the first
	// matching route serves a type, and a handler registered in the
	// process (--demo) comes first. SPOOL_REMOTE_ROUTES, default none.
	RemoteRoutes string `envconfig:"REMOTE_ROUTES" desc:"remote handlers: <type-pattern>=<subject>[;concurrency=<n>][;timeout=<d>],... (default none)"`
	// RemoteRoutesFile is a JSON file of routes, read after
	// SPOOL_REMOTE_ROUTES: {"routes":[{"type":"billing.>",
	// "subject":"spool.remote.billing","concurrency":8,"timeout":"30s"}]}.
	// SPOOL_REMOTE_ROUTES_FILE, default none.
	RemoteRoutesFile string `envconfig:"REMOTE_ROUTES_FILE" desc:"JSON file of remote handler routes, after SPOOL_REMOTE_ROUTES (default none)"`

	partition int // -1: all
	discard   []string
	weights   consumer.Weights
	boost     []consumer.BoostStep
	routes    []remote.Route
}

// Validate checks every setting, naming the variable at fault, and parses
// the weights and the boost.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	var err error
	if c.partition, err = parsePartition(c.Partition); err != nil {
		return fmt.Errorf("SPOOL_PARTITION: %w", err)
	}
	if c.weights, err = parseWeights(c.Weights); err != nil {
		return fmt.Errorf("SPOOL_WEIGHTS: %w", err)
	}
	if c.boost, err = parseBoost(c.Boost); err != nil {
		return fmt.Errorf("SPOOL_BOOST: %w", err)
	}
	if c.discard, err = parsePatterns(c.DiscardResults); err != nil {
		return fmt.Errorf("SPOOL_DISCARD_RESULTS: %w", err)
	}
	if c.routes, err = parseRoutes(c.RemoteRoutes); err != nil {
		return fmt.Errorf("SPOOL_REMOTE_ROUTES: %w", err)
	}
	if c.RemoteRoutesFile != "" {
		fromFile, err := readRoutesFile(c.RemoteRoutesFile)
		if err != nil {
			return fmt.Errorf("SPOOL_REMOTE_ROUTES_FILE: %w", err)
		}
		c.routes = append(c.routes, fromFile...)
	}
	seen := map[string]bool{}
	for _, r := range c.routes {
		if seen[r.Pattern] {
			return fmt.Errorf("SPOOL_REMOTE_ROUTES, SPOOL_REMOTE_ROUTES_FILE: type pattern %q is routed twice", r.Pattern)
		}
		seen[r.Pattern] = true
	}
	checks := []struct {
		bad bool
		msg string
	}{
		{c.ConcurrencyMin < 1, fmt.Sprintf("SPOOL_CONCURRENCY_MIN: %d must be at least 1", c.ConcurrencyMin)},
		{c.ConcurrencyMax < c.ConcurrencyMin, fmt.Sprintf("SPOOL_CONCURRENCY_MAX: %d is below SPOOL_CONCURRENCY_MIN %d", c.ConcurrencyMax, c.ConcurrencyMin)},
		{c.RetryBase <= 0, fmt.Sprintf("SPOOL_RETRY_BASE: %s must be positive", c.RetryBase)},
		{c.RetryMax < c.RetryBase, fmt.Sprintf("SPOOL_RETRY_MAX: %s is below SPOOL_RETRY_BASE %s", c.RetryMax, c.RetryBase)},
		{c.RetryJitter < 0 || c.RetryJitter > 1, fmt.Sprintf("SPOOL_RETRY_JITTER: %g must be 0 to 1", c.RetryJitter)},
		{c.DefaultMaxRetries < 0 || c.DefaultMaxRetries > spool.MaxMaxRetries, fmt.Sprintf("SPOOL_DEFAULT_MAX_RETRIES: %d must be 0 to %d", c.DefaultMaxRetries, spool.MaxMaxRetries)},
		{c.TaskTimeout <= 0 || c.TaskTimeout > spool.MaxTimeout, fmt.Sprintf("SPOOL_TASK_TIMEOUT: %s must be positive and at most %s", c.TaskTimeout, spool.MaxTimeout)},
		{c.ShutdownTimeout < 0, fmt.Sprintf("SPOOL_SHUTDOWN_TIMEOUT: %s is negative", c.ShutdownTimeout)},
		{c.ScaleUpFill <= 0 || c.ScaleUpFill > 1, fmt.Sprintf("SPOOL_SCALE_UP_FILL: %g must be in (0, 1]", c.ScaleUpFill)},
		{c.ScaleDownIdle <= 0, fmt.Sprintf("SPOOL_SCALE_DOWN_IDLE: %s must be positive", c.ScaleDownIdle)},
		{c.ProcessingDelay < 0, fmt.Sprintf("SPOOL_PROCESSING_DELAY: %s is negative", c.ProcessingDelay)},
		{c.StatsInterval < 0, fmt.Sprintf("SPOOL_STATS_INTERVAL: %s is negative", c.StatsInterval)},
	}
	for _, ch := range checks {
		if ch.bad {
			return fmt.Errorf("%s", ch.msg)
		}
	}
	if c.MetricsAddr != metricsOff {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fmt.Errorf("SPOOL_METRICS_ADDR: %q is not host:port or off: %w", c.MetricsAddr, err)
		}
	}
	if c.WorkerName == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		c.WorkerName = host + "-" + strconv.Itoa(os.Getpid())
	}
	return nil
}

// Options turns the configuration into worker options.
func (c *Config) Options() []consumer.Option {
	return []consumer.Option{
		consumer.WithNames(c.Names()),
		consumer.WithWorkerName(c.WorkerName),
		consumer.WithConcurrency(c.ConcurrencyMin, c.ConcurrencyMax),
		consumer.WithPartition(c.partition),
		consumer.WithWeights(c.weights),
		consumer.WithBoost(c.boost...),
		consumer.WithStrict(c.Strict),
		consumer.WithRetry(c.RetryBase, c.RetryMax, c.DefaultMaxRetries),
		consumer.WithRetryJitter(c.RetryJitter),
		consumer.WithTaskTimeout(c.TaskTimeout),
		consumer.WithShutdownTimeout(c.handlerTimeout()),
		consumer.WithAutoscale(c.ScaleUpFill, c.ScaleDownIdle),
		consumer.WithProcessingDelay(c.ProcessingDelay),
		consumer.WithEvents(c.Events),
		consumer.WithDiscardResults(c.discard...),
	}
}

// parsePatterns reads comma-separated task types or type patterns.
func parsePatterns(s string) ([]string, error) {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if err := spool.ValidateTypePattern(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// handlerTimeout is the part of the shutdown timeout running handlers get
// to finish: all but a tenth of it, at most 3s, which is left to hand the
// tasks of the handlers still running back.
func (c Config) handlerTimeout() time.Duration {
	return c.ShutdownTimeout - min(c.ShutdownTimeout/10, 3*time.Second)
}

// parsePartition reads "all" (or nothing) as -1, every partition, and a
// partition number as itself.
func parsePartition(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "all") {
		return -1, nil
	}
	k, err := strconv.Atoi(s)
	if err != nil || k < 0 || k >= streams.MaxPartitions {
		return 0, fmt.Errorf("%q must be all or a partition 0 to %d", s, streams.MaxPartitions-1)
	}
	return k, nil
}

// parseWeights reads "critical=1,high=0.7"; unnamed priorities keep their
// default weight.
func parseWeights(s string) (consumer.Weights, error) {
	w := consumer.DefaultWeights()
	seen := map[spool.Priority]bool{}
	for _, part := range splitList(s) {
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return w, fmt.Errorf("%q is not <priority>=<weight>", part)
		}
		p, err := spool.ParsePriority(strings.TrimSpace(name))
		if err != nil {
			return w, errors.New(spool.Detail(err))
		}
		if seen[p] {
			return w, fmt.Errorf("%s is given twice", p)
		}
		seen[p] = true
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || !(f > 0) || f > 1e6 {
			return w, fmt.Errorf("weight %q of %s must be a positive number up to 1e6", val, p)
		}
		w[p] = f
	}
	return w, nil
}

// parseBoost reads "30s=1.5,60s=1.75,90s=2" (ages increasing, factors at
// least 1).
func parseBoost(s string) ([]consumer.BoostStep, error) {
	var steps []consumer.BoostStep
	for _, part := range splitList(s) {
		age, val, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not <age>=<factor> (e.g. 30s=1.5)", part)
		}
		d, err := time.ParseDuration(strings.TrimSpace(age))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("age %q is not a positive Go duration", age)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || !(f >= 1) || f > 1e6 {
			return nil, fmt.Errorf("factor %q for %s must be a number from 1 to 1e6", val, d)
		}
		if n := len(steps); n > 0 && d <= steps[n-1].After {
			return nil, fmt.Errorf("ages must increase: %s after %s", d, steps[n-1].After)
		}
		steps = append(steps, consumer.BoostStep{After: d, Factor: f})
	}
	return steps, nil
}

// parseRoutes reads "<pattern>=<subject>[;concurrency=<n>][;timeout=<d>],...".
func parseRoutes(s string) ([]remote.Route, error) {
	var routes []remote.Route
	for _, part := range splitList(s) {
		fields := strings.Split(part, ";")
		pattern, subject, ok := strings.Cut(fields[0], "=")
		if !ok {
			return nil, fmt.Errorf("%q is not <type-pattern>=<subject>[;concurrency=<n>][;timeout=<duration>]", part)
		}
		r := remote.Route{Pattern: strings.TrimSpace(pattern), Subject: strings.TrimSpace(subject)}
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			v = strings.TrimSpace(v)
			switch strings.TrimSpace(k) {
			case "concurrency":
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("route %s: concurrency %q must be a whole number, 0 (no cap) or more", r.Pattern, v)
				}
				r.Concurrency = n
			case "timeout":
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 {
					return nil, fmt.Errorf("route %s: timeout %q must be a Go duration such as 30s, 0 (the task's own deadline) or more", r.Pattern, v)
				}
				r.Timeout = d
			default:
				return nil, fmt.Errorf("route %s: unknown setting %q (allowed: concurrency, timeout)", r.Pattern, f)
			}
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("route %s: %w", r.Pattern, err)
		}
		routes = append(routes, r)
	}
	return routes, nil
}

// routesFile is the JSON layout of SPOOL_REMOTE_ROUTES_FILE.
type routesFile struct {
	Routes []struct {
		Pattern     string `json:"type"`
		Subject     string `json:"subject"`
		Concurrency int    `json:"concurrency"`
		Timeout     string `json:"timeout"`
	} `json:"routes"`
}

// readRoutesFile reads a routes file; unknown fields are refused, so a
// misspelt setting is not silently ignored.
func readRoutesFile(path string) ([]remote.Route, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f routesFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w (want {\"routes\":[{\"type\":\"<pattern>\",\"subject\":\"<subject>\",\"concurrency\":<n>,\"timeout\":\"<duration>\"}]})", path, err)
	}
	routes := make([]remote.Route, 0, len(f.Routes))
	for i, fr := range f.Routes {
		r := remote.Route{Pattern: fr.Pattern, Subject: fr.Subject, Concurrency: fr.Concurrency}
		if fr.Timeout != "" {
			d, err := time.ParseDuration(fr.Timeout)
			if err != nil {
				return nil, fmt.Errorf("%s: routes[%d].timeout %q is not a Go duration such as 30s", path, i, fr.Timeout)
			}
			r.Timeout = d
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("%s: routes[%d]: %w", path, i, err)
		}
		routes = append(routes, r)
	}
	return routes, nil
}

func splitList(s string) []string {
	parts := strings.Split(s, ",")
	return slices.DeleteFunc(parts, func(p string) bool { return strings.TrimSpace(p) == "" })
}
