// Package logging builds the *slog.Logger a Spool binary injects into its
// libraries: tint's coloured text for people, JSON for machines.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"
)

// ParseLevel maps debug, info, warn and error to slog levels.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log level %q is not one of debug, info, warn, error", s)
}

// New returns a logger writing to w in format "text" (tint) or "json".
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	switch format {
	case "text", "":
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	}
	return nil, fmt.Errorf("log format %q is not text or json", format)
}

// isTerminal reports whether w is a character device, so colour codes only
// reach terminals, never files or pipes.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// OrDefault returns l, or when l is nil the default logger of Spool's
// libraries: warnings and errors as text on standard error, so a program
// that gives no logger still hears about a lost connection or a failed
// write, and sees nothing of the routine info and debug lines. Every
// constructor and WithLogger option of Spool's libraries applies it, so a
// nil logger is always accepted.
func OrDefault(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
