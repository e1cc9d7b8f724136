package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kelseyhightower/envconfig"
)

// Known lists every SPOOL_ variable some part of Spool reads: the binaries'
// configurations (each binary's tests check that its variables are here),
// the deployment files' secrets and the test suite's switches. A variable
// one binary does not read is not an error, since one environment often
// serves several binaries; a variable no part of Spool reads is a typo, and
// Warnings names the closest known one.
var Known = []string{
	// Every binary (Common).
	"SPOOL_NATS_URL", "SPOOL_NATS_USER", "SPOOL_NATS_PASSWORD", "SPOOL_NATS_TOKEN", "SPOOL_NATS_CREDS",
	"SPOOL_NATS_TLS_CA", "SPOOL_NATS_TLS_CERT", "SPOOL_NATS_TLS_KEY",
	"SPOOL_PREFIX", "SPOOL_LOG_LEVEL", "SPOOL_LOG_FORMAT", "SPOOL_STARTUP_TIMEOUT",
	// The topology (spool-admin, spool-dev).
	"SPOOL_REPLICAS", "SPOOL_STORAGE", "SPOOL_DUPLICATE_WINDOW", "SPOOL_MAX_MSG_SIZE", "SPOOL_ACK_WAIT",
	"SPOOL_MAX_DELIVER", "SPOOL_MAX_ACK_PENDING", "SPOOL_RESULT_TTL", "SPOOL_PARTITIONS", "SPOOL_CONSUMERS",
	// spool-producer serve and spool-dev.
	"SPOOL_HTTP_ADDR", "SPOOL_HTTP_TOKEN", "SPOOL_HTTP_MAX_BODY",
	// spool-consumer (SPOOL_METRICS_ADDR also spool-dev).
	"SPOOL_PARTITION", "SPOOL_CONCURRENCY_MIN", "SPOOL_CONCURRENCY_MAX", "SPOOL_WEIGHTS", "SPOOL_BOOST", "SPOOL_STRICT",
	"SPOOL_RETRY_BASE", "SPOOL_RETRY_MAX", "SPOOL_RETRY_JITTER", "SPOOL_DEFAULT_MAX_RETRIES",
	"SPOOL_TASK_TIMEOUT", "SPOOL_SHUTDOWN_TIMEOUT", "SPOOL_WORKER_NAME", "SPOOL_SCALE_UP_FILL",
	"SPOOL_SCALE_DOWN_IDLE", "SPOOL_PROCESSING_DELAY", "SPOOL_EVENTS", "SPOOL_DISCARD_RESULTS", "SPOOL_STATS_INTERVAL", "SPOOL_DLQ_ROUTER", "SPOOL_UNSERVED_DEADLINE",
	"SPOOL_METRICS_ADDR", "SPOOL_REMOTE_ROUTES", "SPOOL_REMOTE_ROUTES_FILE",
	// The example handlers and producers in other languages (examples/).
	"SPOOL_HANDLER_SUBJECT", "SPOOL_HANDLER_QUEUE",
	// spool-dev.
	"SPOOL_DEV_STORE",
	// The nats-server auth configuration in deploy/nats reads these.
	"SPOOL_SYS_PASSWORD", "SPOOL_ADMIN_PASSWORD", "SPOOL_PRODUCER_PASSWORD", "SPOOL_CONSUMER_PASSWORD",
	"SPOOL_BROKER_PASSWORD", "SPOOL_HANDLER_PASSWORD", "SPOOL_WORKER_BILLING_PASSWORD",
	// The test suite and its helper binaries.
	"SPOOL_SOAK", "SPOOL_FAULTS_TABLE", "SPOOL_CONFORMANCE_TABLE", "SPOOL_FAULT_LOG", "SPOOL_CONCURRENCY", "SPOOL_SKIP_BROWSER",
	"SPOOL_CHROMIUM", "SPOOL_UI_SCALE_TASKS", "SPOOL_BENCH_CHILD", "SPOOL_EXAMPLE_RUN",
}

// Keys returns the variables spec reads, in declaration order.
func Keys(spec any) []string {
	var b strings.Builder
	_ = envconfig.Usagef(EnvPrefix, spec, &b, "{{range .}}{{usage_key .}}\n{{end}}")
	return strings.Fields(b.String())
}

// Warnings returns one line for every SPOOL_ variable in environ (as
// os.Environ gives it) that no part of Spool reads, naming the closest
// known variable: "SPOOL_WORKERS is not a Spool variable (did you mean
// SPOOL_WORKER_NAME?)".
func Warnings(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix+"_") || slices.Contains(Known, name) {
			continue
		}
		out = append(out, fmt.Sprintf("%s is not a Spool variable and is ignored (did you mean %s?)", name, closest(name)))
	}
	slices.Sort(out)
	return out
}

// closest is the known variable nearest to name by edit distance.
func closest(name string) string {
	best, bestD := "", 0
	for i, k := range Known {
		// Among names about as far, prefer one that starts like the typo
		// (SPOOL_WORKERS → SPOOL_WORKER_NAME rather than SPOOL_WEIGHTS).
		d := 4*distance(name, k) - commonPrefix(name, k)
		if i == 0 || d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// commonPrefix is the length of the prefix a and b share after SPOOL_.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return max(n-len(EnvPrefix)-1, 0)
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
