package jsproto

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// A request the server refuses for the user's permissions gets no answer:
// the server drops it and tells the connection with an asynchronous
// "permissions violation" error. Waiting for the reply would read as an
// outage and be retried until the caller's deadline. A Retry given the
// connection (Retry.Conn) watches for that error while a try waits and
// ends the call at once with a *DeniedError.

// ErrDenied is matched (errors.Is) by the error of a call the server refused
// because the connection's user lacks the right.
var ErrDenied = errors.New("permission denied")

// deniedWatchAfter is how long a try runs before its connection is watched
// for a permissions violation (a try that answers sooner costs nothing),
// and deniedPoll how often it is looked at then.
const (
	deniedWatchAfter = 100 * time.Millisecond
	deniedPoll       = 50 * time.Millisecond
)

// DeniedError is a call the server refused for the user's permissions. It
// names the role (the connection's user) and what it may not do.
type DeniedError struct {
	// What is what the call tried to do.
	What string
	// User is the connection's user, empty when it authenticated otherwise
	// (a token, credentials).
	User string
	// Action is what the server refused, e.g. `publish to "$JS.API.X"`.
	Action string
	// Err is the server's permissions violation.
	Err error
}

func (e *DeniedError) Error() string {
	role := "this connection's user"
	if e.User != "" {
		role = "the role " + e.User
	}
	return fmt.Sprintf("%s: %s may not %s (%v)", e.What, role, e.Action, e.Err)
}

// Unwrap returns ErrDenied and the server's error
// (nats.ErrPermissionViolation).
func (e *DeniedError) Unwrap() []error { return []error{ErrDenied, e.Err} }

var violationRe = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "([^"]*)"`)

// Denied turns a permissions violation (nats.ErrPermissionViolation) into a
// *DeniedError for user; what says what the call tried to do.
func Denied(what, user string, violation error) *DeniedError {
	action := "do this"
	if m := violationRe.FindStringSubmatch(violation.Error()); m != nil {
		verb := "publish to"
		if strings.EqualFold(m[1], "subscription") {
			verb = "subscribe to"
		}
		action = fmt.Sprintf("%s %q", verb, m[2])
	}
	return &DeniedError{What: what, User: user, Action: action, Err: violation}
}

// newViolation returns the connection's last error when it is a
// permissions violation other than prev (the last error before the try).
func newViolation(nc *nats.Conn, prev error) error {
	err := nc.LastError()
	if err == nil || err == prev || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	return err
}

// watchDenied cancels a try (cancel) when nc reports a new permissions
// violation while it runs. The returned stop ends the watch.
func watchDenied(ctx context.Context, nc *nats.Conn, prev error, cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	t := time.AfterFunc(deniedWatchAfter, func() {
		tick := time.NewTicker(deniedPoll)
		defer tick.Stop()
		for {
			if err := newViolation(nc, prev); err != nil {
				cancel(err)
				return
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() {
		t.Stop()
		close(done)
	}
}
