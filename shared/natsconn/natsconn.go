// Package natsconn connects to NATS the way every Spool process should:
// authenticated as configured, reconnecting forever, and logging every
// disconnect and reconnect.
package natsconn

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spoolq/spool/shared/config"
	"github.com/spoolq/spool/shared/logging"
)

// Options builds the nats.Options for cfg. name identifies the connection in
// server monitoring (spool-consumer, spool-producer, ...).
func Options(cfg config.NATS, name string, logger *slog.Logger) []nats.Option {
	logger = logging.OrDefault(logger)
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil {
				return // a deliberate Close; ClosedHandler logs it
			}
			logger.Warn("nats disconnected", "error", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			logger.Debug("nats connection closed")
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			logger.Error("nats async error", "error", err, "subject", subject)
		}),
	}
	switch {
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	return opts
}

// Connect dials cfg.URL. The first connection must succeed before ctx ends;
// after that the connection reconnects forever.
func Connect(ctx context.Context, cfg config.NATS, name string, logger *slog.Logger) (*nats.Conn, error) {
	logger = logging.OrDefault(logger)
	opts := Options(cfg, name, logger)
	if dl, ok := ctx.Deadline(); ok {
		opts = append(opts, nats.Timeout(time.Until(dl)))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", cfg.URL, err)
	}
	logger.InfoContext(ctx, "connected to nats", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName())
	return nc, nil
}
