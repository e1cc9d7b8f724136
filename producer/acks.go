package producer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Retries of a publish answered by no responders (no stream listening,
// as during a stream leader election), as nats.go's PublishAsync does.
const (
	pubRetries   = jetstream.DefaultPubRetryAttempts
	pubRetryWait = jetstream.DefaultPubRetryWait
)

// acks carries EnqueueBatch's publishes and routes JetStream's
// acknowledgements back to the batches waiting for them. Each publish
// has a reply subject of the client's own, <inbox>.<batch>.<task index>,
// and one wildcard subscription per client (made by the first batch,
// ended by Close) receives every answer.
//
// Compared with nats.go's PublishAsync futures it saves, per task, a future
// with its channels and timer, a map entry and a reflective JSON decode of
// the acknowledgement.
type acks struct {
	nc      *nats.Conn
	timeout time.Duration // for each acknowledgement, and for room in the window
	room    chan struct{} // one token per publish in flight, across batches

	mu      sync.Mutex
	sub     *nats.Subscription
	prefix  string // of reply subjects, with its trailing dot
	next    uint64
	batches map[uint64]*batch
}

func newAcks(nc *nats.Conn, timeout time.Duration, window int) *acks {
	return &acks{nc: nc, timeout: timeout, room: make(chan struct{}, window), batches: make(map[uint64]*batch)}
}

// batch is the publishes of one EnqueueBatch call. acks.mu guards its
// fields once it is open, until close.
type batch struct {
	id      uint64
	reply   string   // reply subjects: reply + task index in base 36
	flights []flight // by task index
	waiting int      // flights in flight
	wake    chan struct{}
	closed  bool // by Client.Close: publish no more
}

type flightState uint8

const (
	unpublished flightState = iota
	inFlight
	acked  // stored (or a duplicate): seq, dup
	failed // not stored: err
	lost   // no acknowledgement (err says why): it may be stored
)

type flight struct {
	p        prepared
	claimed  bool // p's unique key was claimed for this publish
	deadline time.Time
	retries  int
	outcome
}

type outcome struct {
	state flightState
	seq   uint64
	dup   bool
	err   error
}

// open registers a batch of n tasks, subscribing to acknowledgements if
// the client is not yet.
func (a *acks) open(n int) (*batch, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sub == nil {
		prefix := a.nc.NewInbox() + "."
		sub, err := a.nc.Subscribe(prefix+"*.*", func(m *nats.Msg) { a.onReply(prefix, m) })
		if err != nil {
			return nil, fmt.Errorf("subscribing to publish acknowledgements: %w", err)
		}
		// The window bounds what can wait here; a dropped acknowledgement
		// would cost a timeout.
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			_ = sub.Unsubscribe()
			return nil, fmt.Errorf("subscribing to publish acknowledgements: %w", err)
		}
		a.sub, a.prefix = sub, prefix
	}
	a.next++
	b := &batch{
		id:      a.next,
		reply:   a.prefix + strconv.FormatUint(a.next, 36) + ".",
		flights: make([]flight, n),
		wake:    make(chan struct{}, 1),
	}
	a.batches[b.id] = b
	return b, nil
}

// publish sends task i of b once the window has room. An error means it
// was not published; a failure of the publish itself settles the flight.
func (a *acks) publish(ctx context.Context, b *batch, i int, p prepared, claimed bool) error {
	if err := a.acquire(ctx, b); err != nil {
		return err
	}
	p.msg.Reply = b.reply + strconv.FormatUint(uint64(i), 36)
	a.mu.Lock()
	if b.closed {
		a.mu.Unlock()
		<-a.room
		return jetstream.ErrJetStreamPublisherClosed
	}
	b.flights[i] = flight{p: p, claimed: claimed, deadline: time.Now().Add(a.timeout), outcome: outcome{state: inFlight}}
	b.waiting++
	a.mu.Unlock()
	if err := a.nc.PublishMsg(p.msg); err != nil {
		a.settle(b, i, outcome{state: failed, err: err})
	}
	return nil
}

// acquire takes a token of the window. When none frees up within the
// timeout, b's own flights that are overdue are given up as lost, and
// without any it fails with jetstream.ErrTooManyStalledMsgs.
func (a *acks) acquire(ctx context.Context, b *batch) error {
	select {
	case a.room <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(a.timeout)
	defer t.Stop()
	for {
		select {
		case a.room <- struct{}{}:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case now := <-t.C:
			if a.expire(b, now, jetstream.ErrAsyncPublishTimeout) == 0 {
				return jetstream.ErrTooManyStalledMsgs
			}
			t.Reset(a.timeout)
		}
	}
}

// wait returns once every flight of b is settled: acknowledged, or lost
// at its deadline or when ctx ends. It then unregisters b, whose flights
// the caller may read.
func (a *acks) wait(ctx context.Context, b *batch) {
	defer func() {
		a.mu.Lock()
		delete(a.batches, b.id)
		a.mu.Unlock()
	}()
	var t *time.Timer
	for {
		a.mu.Lock()
		next := time.Time{} // the earliest deadline in flight
		for i := range b.flights {
			if f := &b.flights[i]; f.state == inFlight && (next.IsZero() || f.deadline.Before(next)) {
				next = f.deadline
			}
		}
		a.mu.Unlock()
		if next.IsZero() {
			return
		}
		d := time.Until(next)
		if d <= 0 {
			a.expire(b, time.Now(), jetstream.ErrAsyncPublishTimeout)
			continue
		}
		if t == nil {
			t = time.NewTimer(d)
			defer t.Stop()
		} else {
			t.Reset(d)
		}
		select {
		case <-b.wake:
		case <-t.C:
		case <-ctx.Done():
			a.expire(b, time.Time{}, context.Cause(ctx))
		}
	}
}

// onReply settles the flight an acknowledgement answers.
func (a *acks) onReply(prefix string, m *nats.Msg) {
	bid, i, ok := parseReply(m.Subject, prefix)
	if !ok {
		return
	}
	seq, dup, err := parsePubAck(m)
	a.mu.Lock()
	b := a.batches[bid]
	if b == nil || i >= uint64(len(b.flights)) || b.flights[i].state != inFlight {
		a.mu.Unlock()
		return // given up already
	}
	if f := &b.flights[i]; errors.Is(err, jetstream.ErrNoStreamResponse) && f.retries < pubRetries {
		f.retries++
		a.mu.Unlock()
		time.AfterFunc(pubRetryWait, func() { a.republish(b, int(i)) })
		return
	}
	o := outcome{state: acked, seq: seq, dup: dup}
	if err != nil {
		o = outcome{state: failed, err: err}
	}
	a.settleLocked(b, int(i), o)
	a.mu.Unlock()
	<-a.room
}

// republish sends flight i of b again, unless it was settled meanwhile.
func (a *acks) republish(b *batch, i int) {
	a.mu.Lock()
	f := &b.flights[i]
	if f.state != inFlight {
		a.mu.Unlock()
		return
	}
	f.deadline = time.Now().Add(a.timeout)
	msg := f.p.msg
	a.mu.Unlock()
	if err := a.nc.PublishMsg(msg); err != nil {
		a.settle(b, i, outcome{state: failed, err: err})
	}
}

// settle gives flight i of b its outcome unless it has one.
func (a *acks) settle(b *batch, i int, o outcome) {
	a.mu.Lock()
	ok := b.flights[i].state == inFlight
	if ok {
		a.settleLocked(b, i, o)
	}
	a.mu.Unlock()
	if ok {
		<-a.room
	}
}

// settleLocked settles flight i, in flight, of b; the caller holds a.mu
// and releases the flight's window token.
func (a *acks) settleLocked(b *batch, i int, o outcome) {
	b.flights[i].outcome = o
	b.waiting--
	if b.waiting == 0 {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// expire gives up, as lost with err, b's flights in flight whose deadline
// is not after now (all of them for a zero now), and returns how many.
func (a *acks) expire(b *batch, now time.Time, err error) int {
	n := 0
	a.mu.Lock()
	for i := range b.flights {
		if f := &b.flights[i]; f.state == inFlight && (now.IsZero() || !f.deadline.After(now)) {
			a.settleLocked(b, i, outcome{state: lost, err: err})
			n++
		}
	}
	a.mu.Unlock()
	for range n {
		<-a.room
	}
	return n
}

// close ends the subscription; the acknowledgements still awaited are
// lost, and open batches publish no more.
func (a *acks) close() {
	a.mu.Lock()
	sub := a.sub
	a.sub = nil
	open := make([]*batch, 0, len(a.batches))
	for _, b := range a.batches {
		b.closed = true
		open = append(open, b)
	}
	a.mu.Unlock()
	for _, b := range open {
		a.expire(b, time.Time{}, jetstream.ErrJetStreamPublisherClosed)
	}
	if sub != nil {
		_ = sub.Unsubscribe()
	}
}

// parseReply reads <prefix><batch>.<index> (base 36).
func parseReply(subject, prefix string) (bid, i uint64, ok bool) {
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return 0, 0, false
	}
	bs, is, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, 0, false
	}
	bid, err1 := strconv.ParseUint(bs, 36, 64)
	i, err2 := strconv.ParseUint(is, 36, 64)
	return bid, i, err1 == nil && err2 == nil
}

var (
	ackStreamHead = []byte(`{"stream":`)
	ackErrorKey   = []byte(`"error"`)
	ackSeqKey     = []byte(`"seq":`)
	ackDupKey     = []byte(`"duplicate":`)
	ackTrue       = []byte(`true`)
)

// parsePubAck reads a JetStream publish acknowledgement: the stream
// sequence and whether it was a duplicate, or why the message was not
// stored. The common reply, {"stream":...,"seq":...}, is read without
// decoding it.
func parsePubAck(m *nats.Msg) (seq uint64, dup bool, err error) {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return 0, false, jetstream.ErrNoStreamResponse
		}
		return 0, false, jetstream.ErrInvalidJSAck
	}
	if bytes.HasPrefix(m.Data, ackStreamHead) && !bytes.Contains(m.Data, ackErrorKey) {
		if k := bytes.Index(m.Data, ackSeqKey); k >= 0 {
			if seq, ok := leadingUint(afterSpace(m.Data[k+len(ackSeqKey):])); ok {
				return seq, ackDuplicate(m.Data), nil
			}
		}
	}
	var r struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Sequence  uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return 0, false, r.Error
	}
	if r.Stream == "" {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	return r.Sequence, r.Duplicate, nil
}

// ackDuplicate reads the duplicate flag of an acknowledgement (the server
// writes it as "duplicate": true).
func ackDuplicate(data []byte) bool {
	k := bytes.Index(data, ackDupKey)
	return k >= 0 && bytes.HasPrefix(afterSpace(data[k+len(ackDupKey):]), ackTrue)
}

func afterSpace(b []byte) []byte { return bytes.TrimLeft(b, " ") }

// leadingUint parses the decimal digits b starts with.
func leadingUint(b []byte) (uint64, bool) {
	var n uint64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		d := uint64(b[i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, i > 0
}
