package httpapi

import (
	"github.com/spoolq/spool/shared/logging"
	"log/slog"
	"net/http"
	"time"
)

// Server timeouts.
const (
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout = 15 * time.Second
	// ReadHeaderTimeout bounds reading the request headers.
	ReadHeaderTimeout = 5 * time.Second
	// WriteTimeout bounds handling and answering a request.
	WriteTimeout = 15 * time.Second
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout = 60 * time.Second
	// DefaultAddr is where the broker listens unless told otherwise:
	// loopback only.
	DefaultAddr = "127.0.0.1:8080"
)

// NewServer returns an *http.Server for h on addr (DefaultAddr when empty)
// with the broker's timeouts; run it with ListenAndServe and stop it with
// Shutdown.
func NewServer(addr string, h http.Handler, logger *slog.Logger) *http.Server {
	if addr == "" {
		addr = DefaultAddr
	}
	if logger == nil {
		logger = logging.OrDefault(nil)
	}
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadTimeout:       ReadTimeout,
		ReadHeaderTimeout: ReadHeaderTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}
