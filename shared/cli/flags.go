package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// NewFlagSet returns a flag set that reports errors only through Parse's
// return value: it prints nothing itself, so the caller prints one line.
func NewFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// Parse parses args and rewrites the flag package's errors into one line in
// the flag's terms ("--max-retries: "abc" is not a whole number").
// flag.ErrHelp comes back unchanged for -h and --help: print the usage and
// exit 0 (see Exit).
func Parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return Explain(fs, err)
}

// Explain turns an error of fs.Parse into one line that names the flag and
// says what it accepts.
func Explain(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	help := fmt.Sprintf("(%s --help lists the flags)", fs.Name())
	switch {
	case strings.HasPrefix(msg, "flag provided but not defined: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag provided but not defined: "), "-")
		return fmt.Errorf("unknown flag --%s %s", name, help)
	case strings.HasPrefix(msg, "flag needs an argument: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag needs an argument: "), "-")
		return fmt.Errorf("--%s needs a value%s", name, want(fs.Lookup(name)))
	case strings.HasPrefix(msg, "bad flag syntax: "):
		return fmt.Errorf("%q is not a flag %s", strings.TrimPrefix(msg, "bad flag syntax: "), help)
	case strings.HasPrefix(msg, "invalid boolean value "):
		// invalid boolean value "x" for -name: parse error
		value, name, _ := splitInvalid(strings.TrimPrefix(msg, "invalid boolean value "), " for -")
		return fmt.Errorf("--%s: %s is not true or false", name, value)
	case strings.HasPrefix(msg, "invalid value "):
		// invalid value "x" for flag -name: reason
		value, name, reason := splitInvalid(strings.TrimPrefix(msg, "invalid value "), " for flag -")
		f := fs.Lookup(name)
		switch reason {
		case "parse error", "value out of range":
			return fmt.Errorf("--%s: %s is not %s", name, value, kind(f))
		}
		return fmt.Errorf("--%s: %s", name, reason)
	}
	return err
}

// splitInvalid splits `"value" <sep>name: reason`.
func splitInvalid(rest, sep string) (value, name, reason string) {
	i := strings.LastIndex(rest, sep)
	if i < 0 {
		return rest, "", ""
	}
	value, rest = rest[:i], rest[i+len(sep):]
	name, reason, _ = strings.Cut(rest, ": ")
	return value, name, reason
}

// kind says in words what a flag of f's type accepts.
func kind(f *flag.Flag) string {
	if f == nil {
		return "a valid value"
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return "a valid value"
	}
	switch g.Get().(type) {
	case int, int64:
		return "a whole number"
	case uint, uint64:
		return "a whole number of 0 or more"
	case float64:
		return "a number"
	case time.Duration:
		return "a duration such as 500ms, 30s, 5m or 1h"
	case bool:
		return "true or false"
	}
	return "a valid value"
}

// want is " (a whole number)" and the like for a flag's value.
func want(f *flag.Flag) string {
	k := kind(f)
	if k == "a valid value" {
		return ""
	}
	return " (" + k + ")"
}

// Verbose registers -v on fs: log informational lines too.
func Verbose(fs *flag.FlagSet) *bool {
	return fs.Bool("v", false, "verbose: also log informational lines (connections, progress) on stderr")
}

// LogLevel is the level a one-shot command logs at: the configured level
// (SPOOL_LOG_LEVEL) with -v, otherwise at least warn, so a command that
// succeeds prints its answer and nothing else.
func LogLevel(configured string, verbose bool) string {
	if verbose {
		return configured
	}
	switch strings.ToLower(configured) {
	case "error":
		return "error"
	}
	return "warn"
}

// PrintFlags writes every flag of fs, one per line, with its default when
// the flag has one and its text does not already say it.
func PrintFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		head := "--" + f.Name
		if len(f.Name) == 1 {
			head = "-" + f.Name
		}
		if name != "" {
			head += " " + name
		}
		line := fmt.Sprintf("  %-22s %s", head, usage)
		if len(head) > 22 {
			line = fmt.Sprintf("  %s\n  %-22s %s", head, "", usage)
		}
		if def := f.DefValue; def != "" && def != "0" && def != "false" && def != "0s" && !strings.Contains(usage, "default") {
			line += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintln(w, line)
	})
}

// Exit maps a command's error to its exit code, printing the error as one
// line "<command>: <error>" on stderr: 0 for nil and flag.ErrHelp (the help
// was printed), 1 otherwise.
func Exit(stderr io.Writer, command string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", command, err)
	return 1
}
