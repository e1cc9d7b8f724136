package consumer

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// pullErrorPause is how long a priority rests after a failed pull, so an
// unreachable server does not turn pulling into a busy loop.
const pullErrorPause = 500 * time.Millisecond

// fetch pulls up to n tasks of p that are available now (a no-wait pull
// request: the server answers at once with what it has) into the n slots
// reserved for it.
func (w *Worker) fetch(p spool.Priority, n int) {
	var msgs []jetstream.Msg
	batch, err := w.cons[p].FetchNoWait(n)
	if err == nil {
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		err = batch.Error()
	}
	if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		w.pullFailed(p, "fetch", err)
	}
	w.mu.Lock()
	w.fetching -= n
	st := &w.prio[p]
	st.fetches--
	if len(msgs) < n {
		st.pending, st.maybe = 0, false
	} else if md, err := msgs[len(msgs)-1].Metadata(); err == nil {
		st.pending = md.NumPending
	}
	inline := w.startLocked(p, msgs)
	w.mu.Unlock()
	w.nudge()
	w.pulls.Done()
	if inline != nil {
		w.attempt(p, inline)
	}
}

// poll is a long-poll on an empty priority: a one-message pull request that
// waits up to PollWait on the server, so a task published meanwhile is
// delivered within about a millisecond. The slot it reserved takes the task.
func (w *Worker) poll(p spool.Priority) {
	var msgs []jetstream.Msg
	batch, err := w.cons[p].Fetch(1, jetstream.FetchMaxWait(w.o.PollWait))
	if err == nil {
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		err = batch.Error()
	}
	if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		w.pullFailed(p, "long-poll", err)
	}
	w.mu.Lock()
	w.polling--
	st := &w.prio[p]
	st.polling = false
	if len(msgs) > 0 {
		if md, err := msgs[len(msgs)-1].Metadata(); err == nil {
			st.pending = md.NumPending
		}
	}
	inline := w.startLocked(p, msgs)
	w.mu.Unlock()
	w.nudge()
	w.pulls.Done()
	if inline != nil {
		w.attempt(p, inline)
	}
}

// pullFailed logs a failed pull and pauses before the slot is given back.
func (w *Worker) pullFailed(p spool.Priority, kind string, err error) {
	if w.isStopping() && errors.Is(err, nats.ErrConnectionClosed) {
		return
	}
	w.log.Warn("pull failed", "priority", p.String(), "kind", kind, "error", err)
	t := time.NewTimer(pullErrorPause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.stopping:
	}
}

// startLocked takes a slot for each message and starts its attempt in a
// goroutine, except the last, which it returns for the caller to run in its
// own goroutine (one scheduling hop less between pull and handler). Once
// Stop was called it hands the messages back at once instead. w.mu is held.
func (w *Worker) startLocked(p spool.Priority, msgs []jetstream.Msg) (inline jetstream.Msg) {
	for i, m := range msgs {
		if w.isStopping() {
			if err := m.Nak(); err != nil {
				w.log.Warn("handing back a task pulled during shutdown", "priority", p.String(), "error", err)
			}
			continue
		}
		w.busy++
		w.prio[p].busy++
		w.noteBusyLocked()
		w.attempts.Add(1)
		if i == len(msgs)-1 {
			return m
		}
		w.startAttempt(p, m)
	}
	return nil
}

// job is a pulled task waiting for a runner.
type job struct {
	p   spool.Priority
	msg jetstream.Msg
}

// startAttempt runs an attempt on an idle runner goroutine, or on a new
// one when none is idle. Runners outlive their attempts: a fresh goroutine
// grows its stack on every task (copying it a few times), which was a
// tenth of the worker's CPU with fast handlers. There are never more
// runners than attempts have run at once (at most MaxConcurrency); they
// end at Stop.
func (w *Worker) startAttempt(p spool.Priority, m jetstream.Msg) {
	select {
	case w.runq <- job{p: p, msg: m}:
	default:
		w.runners.Add(1)
		go w.runner(job{p: p, msg: m})
	}
}

func (w *Worker) runner(j job) {
	defer w.runners.Done()
	for {
		w.attempt(j.p, j.msg)
		select {
		case j = <-w.runq:
		case <-w.stopping:
			return
		}
	}
}

// release frees the slot of a finished attempt. While fetches are in
// flight the dispatcher would plan nothing before they return (and each
// nudges it then), so it is left asleep.
func (w *Worker) release(p spool.Priority) {
	w.mu.Lock()
	w.busy--
	w.prio[p].busy--
	fetching := w.fetching > 0
	w.mu.Unlock()
	if !fetching {
		w.nudge()
	}
}
