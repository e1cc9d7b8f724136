// Package config loads Spool's environment configuration with envconfig
// under the SPOOL_ prefix. Each binary defines one Config struct that embeds
// Common, loads it once in main with Load, and passes it down. Load's
// errors are one line naming the variable and what it accepts; Warnings
// names the SPOOL_ variables no part of Spool reads (Known lists those it
// does), with the closest known name.
package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	spool "github.com/spoolq/spool/shared"
)

// EnvPrefix is the prefix of every variable: SPOOL_NATS_URL, SPOOL_PREFIX, ...
const EnvPrefix = "SPOOL"

// NATS says how to reach the NATS server. At most one of user/password, token
// and creds file may be set.
type NATS struct {
	// URL is a comma-separated list of server URLs. SPOOL_NATS_URL, default nats://127.0.0.1:4222.
	URL string `envconfig:"NATS_URL" default:"nats://127.0.0.1:4222" desc:"NATS server URLs, comma-separated"`
	// User and Password authenticate with a username. SPOOL_NATS_USER, SPOOL_NATS_PASSWORD.
	User     string `envconfig:"NATS_USER" desc:"user name (with SPOOL_NATS_PASSWORD)"`
	Password string `envconfig:"NATS_PASSWORD" desc:"password (with SPOOL_NATS_USER)"`
	// Token authenticates with a token. SPOOL_NATS_TOKEN.
	Token string `envconfig:"NATS_TOKEN" desc:"token authentication"`
	// CredsFile is a JWT user credentials file. SPOOL_NATS_CREDS.
	CredsFile string `envconfig:"NATS_CREDS" desc:"JWT credentials file (at most one of user, token, creds)"`
	// TLSCA verifies the server; TLSCert and TLSKey present a client
	// certificate. SPOOL_NATS_TLS_CA, SPOOL_NATS_TLS_CERT, SPOOL_NATS_TLS_KEY.
	TLSCA   string `envconfig:"NATS_TLS_CA" desc:"CA file that verifies the server"`
	TLSCert string `envconfig:"NATS_TLS_CERT" desc:"client certificate file (with SPOOL_NATS_TLS_KEY)"`
	TLSKey  string `envconfig:"NATS_TLS_KEY" desc:"client key file (with SPOOL_NATS_TLS_CERT)"`
}

// Validate checks the NATS settings and names the variable at fault.
func (n NATS) Validate() error {
	if strings.TrimSpace(n.URL) == "" {
		return errors.New("SPOOL_NATS_URL: must not be empty")
	}
	for _, u := range strings.Split(n.URL, ",") {
		u = strings.TrimSpace(u)
		if !strings.Contains(u, "://") {
			return fmt.Errorf("SPOOL_NATS_URL: %q has no scheme (want e.g. nats://127.0.0.1:4222)", u)
		}
	}
	methods := 0
	if n.User != "" || n.Password != "" {
		methods++
		if n.User == "" {
			return errors.New("SPOOL_NATS_PASSWORD: set without SPOOL_NATS_USER")
		}
	}
	if n.Token != "" {
		methods++
	}
	if n.CredsFile != "" {
		methods++
		if err := readable(n.CredsFile); err != nil {
			return fmt.Errorf("SPOOL_NATS_CREDS: %w", err)
		}
	}
	if methods > 1 {
		return errors.New("SPOOL_NATS_USER/PASSWORD, SPOOL_NATS_TOKEN and SPOOL_NATS_CREDS: set at most one")
	}
	if (n.TLSCert == "") != (n.TLSKey == "") {
		return errors.New("SPOOL_NATS_TLS_CERT and SPOOL_NATS_TLS_KEY: set both or neither")
	}
	for name, path := range map[string]string{"SPOOL_NATS_TLS_CA": n.TLSCA, "SPOOL_NATS_TLS_CERT": n.TLSCert, "SPOOL_NATS_TLS_KEY": n.TLSKey} {
		if path == "" {
			continue
		}
		if err := readable(path); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cannot read %q: %w", path, err)
	}
	return f.Close()
}

// Common holds the settings every Spool binary shares.
type Common struct {
	NATS
	// Prefix names every subject, stream and bucket. SPOOL_PREFIX, default spool.
	Prefix string `envconfig:"PREFIX" default:"spool" desc:"prefix of every subject, stream, consumer and bucket"`
	// LogLevel is debug, info, warn or error. SPOOL_LOG_LEVEL, default info.
	LogLevel string `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error (one-shot commands log warnings only, unless -v)"`
	// LogFormat is text (coloured, for people) or json. SPOOL_LOG_FORMAT, default text.
	LogFormat string `envconfig:"LOG_FORMAT" default:"text" desc:"text (coloured on a terminal) or json"`
	// StartupTimeout is how long a process waits at start-up for the
	// cluster to answer its look-ups (streams, consumers, buckets),
	// retrying through leader elections and saying what it waits for
	// now and then; a missing stream still fails at once.
	// SPOOL_STARTUP_TIMEOUT, default 5m (DefaultStartupTimeout, also
	// what 0 means: read it with Startup).
	StartupTimeout time.Duration `envconfig:"STARTUP_TIMEOUT" default:"5m" desc:"how long start-up waits for the cluster to answer, through leader elections"`
}

// DefaultStartupTimeout is SPOOL_STARTUP_TIMEOUT's default.
const DefaultStartupTimeout = 5 * time.Minute

// Startup is the start-up deadline: StartupTimeout, or
// DefaultStartupTimeout when it is 0.
func (c Common) Startup() time.Duration {
	if c.StartupTimeout <= 0 {
		return DefaultStartupTimeout
	}
	return c.StartupTimeout
}

// Validate checks the common settings and names the variable at fault.
func (c Common) Validate() error {
	if err := c.NATS.Validate(); err != nil {
		return err
	}
	if _, err := spool.NewNames(c.Prefix); err != nil {
		return fmt.Errorf("SPOOL_PREFIX: %w", err)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("SPOOL_LOG_LEVEL: %q is not one of debug, info, warn, error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("SPOOL_LOG_FORMAT: %q is not text or json", c.LogFormat)
	}
	if c.StartupTimeout < 0 {
		return fmt.Errorf("SPOOL_STARTUP_TIMEOUT: %s is negative (want a duration such as 5m)", c.StartupTimeout)
	}
	return nil
}

// Names returns the names derived from the validated prefix.
func (c Common) Names() spool.Names {
	n, err := spool.NewNames(c.Prefix)
	if err != nil {
		// Validate rejects a bad prefix before anyone asks for names.
		return spool.DefaultNames()
	}
	return n
}

// Validator is a configuration that checks itself after loading.
type Validator interface {
	Validate() error
}

// Load fills spec from the SPOOL_ environment variables, applies defaults and
// validates it. An error is one line that names the variable, its value and
// what it accepts ("SPOOL_CONCURRENCY_MAX: "abc" is not a whole number").
func Load(spec Validator) error {
	if err := envconfig.Process(EnvPrefix, spec); err != nil {
		var pe *envconfig.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s: %q is not %s", pe.KeyName, pe.Value, kindOf(pe.TypeName))
		}
		return fmt.Errorf("reading the SPOOL_ variables: %w", err)
	}
	return spec.Validate()
}

// kindOf says in words what a variable of Go type typ accepts.
func kindOf(typ string) string {
	switch typ {
	case "int", "int8", "int16", "int32", "int64":
		return "a whole number"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number of 0 or more"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "time.Duration":
		return "a duration such as 500ms, 30s, 5m or 1h"
	}
	return "a valid " + typ
}

// Usage writes the table of variables spec understands, with defaults.
func Usage(spec any) string {
	var b strings.Builder
	_ = envconfig.Usagef(EnvPrefix, spec, &b, "{{range .}}  {{usage_key .}}\t{{usage_default .}}\t{{usage_description .}}\n{{end}}")
	return b.String()
}
