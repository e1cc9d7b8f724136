package producer

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

// acks carries EnqueueBatch's publishes and routes JetStream's
// acknowledgements back to the batches waiting for them, on a
// jsproto.Publisher of the client's own (made by the first batch, ended by
// Close). A publish's token is its batch and its task index (see token).
//
// Compared with nats.go's PublishAsync futures it saves, per task, a future
// with its channels and timer, a map entry and a reflective JSON decode of
// the acknowledgement.
type acks struct {
	nc      *nats.Conn
	timeout time.Duration // for each acknowledgement, and for room in the window
	room    chan struct{} // one token per publish in flight, across batches

	mu      sync.Mutex
	pub     *jsproto.Publisher
	next    uint64
	batches map[uint64]*batch
	// inFlight counts the flights awaiting their acknowledgement; idle,
	// when made, is closed as it reaches zero (EnqueueAsyncComplete).
	inFlight int
	idle     chan struct{}
	// stored, when set, is called for each publish the stream acknowledged
	// (on the subscription's goroutine, without a.mu).
	stored func(p prepared, dup bool)
	// stopSweep ends the sweep goroutine, which runs while flights are
	// in flight (nil when it does not).
	stopSweep chan struct{}
}

// token is the publisher token of task i of batch bid: the batch in the
// high 32 bits, the index in the low ones.
func token(bid uint64, i int) uint64 { return bid<<32 | uint64(uint32(i)) }

func newAcks(nc *nats.Conn, timeout time.Duration, window int) *acks {
	return &acks{nc: nc, timeout: timeout, room: make(chan struct{}, window), batches: make(map[uint64]*batch)}
}

// batch is the publishes of one EnqueueBatch call. acks.mu guards its
// fields once it is open, until close.
type batch struct {
	id      uint64
	flights []flight  // by task index
	one     [1]flight // the flights of a batch of one (EnqueueAsync)
	waiting int       // flights in flight
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
	if a.pub == nil {
		pub, err := jsproto.NewPublisher(a.nc, a.onAck)
		if err != nil {
			return nil, err
		}
		a.pub = pub
	}
	a.next++
	b := &batch{id: a.next, wake: make(chan struct{}, 1)}
	if n == 1 {
		b.flights = b.one[:]
	} else {
		b.flights = make([]flight, n)
	}
	a.batches[b.id] = b
	return b, nil
}

// publish sends task i of b once the window has room. An error means it
// was not published; a failure of the publish itself settles the flight.
func (a *acks) publish(ctx context.Context, b *batch, i int, p prepared, claimed bool) error {
	if err := a.acquire(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	pub := a.pub
	if b.closed {
		a.mu.Unlock()
		<-a.room
		return jetstream.ErrJetStreamPublisherClosed
	}
	b.flights[i] = flight{p: p, claimed: claimed, deadline: time.Now().Add(a.timeout), outcome: outcome{state: inFlight}}
	b.waiting++
	a.inFlight++
	if a.stopSweep == nil {
		a.stopSweep = make(chan struct{})
		go a.sweep(a.stopSweep)
	}
	a.mu.Unlock()
	if err := pub.PublishMsg(p.msg, token(b.id, i)); err != nil {
		a.settle(b, i, outcome{state: failed, err: err})
	}
	return nil
}

// acquire takes a token of the window. When none frees up within the
// timeout, the flights that are overdue are given up as lost, and
// without any it fails with jetstream.ErrTooManyStalledMsgs.
func (a *acks) acquire(ctx context.Context) error {
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
			if a.expireOverdue(now) == 0 {
				select {
				case a.room <- struct{}{}: // freed meanwhile (the sweep)
					return nil
				default:
					return jetstream.ErrTooManyStalledMsgs
				}
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

// onAck settles the flight an acknowledgement answers; a publish no
// stream answered is sent again (see jsproto.RetryNoResponders).
func (a *acks) onAck(tok uint64, ack jsproto.PubAck, err error) {
	bid, i := tok>>32, int(uint32(tok))
	a.mu.Lock()
	b := a.batches[bid]
	if b == nil || i >= len(b.flights) || b.flights[i].state != inFlight {
		a.mu.Unlock()
		return // given up already
	}
	if f := &b.flights[i]; jsproto.RetryNoResponders(err, f.retries) {
		f.retries++
		a.mu.Unlock()
		time.AfterFunc(jsproto.NoResponderWait, func() { a.republish(b, i) })
		return
	}
	o := outcome{state: acked, seq: ack.Seq, dup: ack.Duplicate}
	if err != nil {
		o = outcome{state: failed, err: err}
	}
	p := b.flights[i].p
	a.settleLocked(b, i, o)
	a.mu.Unlock()
	<-a.room
	if err == nil && a.stored != nil {
		a.stored(p, ack.Duplicate)
	}
}

// republish sends flight i of b again, unless it was settled meanwhile.
func (a *acks) republish(b *batch, i int) {
	a.mu.Lock()
	f := &b.flights[i]
	if f.state != inFlight || a.pub == nil {
		a.mu.Unlock()
		return
	}
	f.deadline = time.Now().Add(a.timeout)
	msg, pub := f.p.msg, a.pub
	a.mu.Unlock()
	if err := pub.PublishMsg(msg, token(b.id, i)); err != nil {
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
	a.inFlight--
	if a.inFlight == 0 {
		if a.idle != nil {
			close(a.idle)
			a.idle = nil
		}
		if a.stopSweep != nil {
			close(a.stopSweep)
			a.stopSweep = nil
		}
	}
	if b.waiting == 0 && len(b.flights) == 1 {
		// Nothing else can come for it: unregistered now, so a Pending
		// nobody waits for leaves nothing behind.
		delete(a.batches, b.id)
	}
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

// drop unregisters b, which published nothing.
func (a *acks) drop(b *batch) {
	a.mu.Lock()
	delete(a.batches, b.id)
	a.mu.Unlock()
}

// idleCh returns a channel closed once no flight awaits its
// acknowledgement.
func (a *acks) idleCh() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inFlight == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if a.idle == nil {
		a.idle = make(chan struct{})
	}
	return a.idle
}

// sweep gives up overdue flights as lost, for publishes nobody waits for
// yet (EnqueueAsync without Wait): their window tokens come back, and
// EnqueueAsyncComplete fires. It runs while flights are in flight.
func (a *acks) sweep(stop chan struct{}) {
	t := time.NewTicker(max(a.timeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			a.expireOverdue(now)
		}
	}
}

// expireOverdue gives up, as lost, every flight whose deadline is not
// after now, and returns how many.
func (a *acks) expireOverdue(now time.Time) int {
	a.mu.Lock()
	var late []*batch
	for _, b := range a.batches {
		for i := range b.flights {
			if f := &b.flights[i]; f.state == inFlight && !f.deadline.After(now) {
				late = append(late, b)
				break
			}
		}
	}
	a.mu.Unlock()
	n := 0
	for _, b := range late {
		n += a.expire(b, now, jetstream.ErrAsyncPublishTimeout)
	}
	return n
}

// close ends the subscription; the acknowledgements still awaited are
// lost, and open batches publish no more.
func (a *acks) close() {
	a.mu.Lock()
	pub := a.pub
	a.pub = nil
	if a.stopSweep != nil {
		close(a.stopSweep)
		a.stopSweep = nil
	}
	open := make([]*batch, 0, len(a.batches))
	for _, b := range a.batches {
		b.closed = true
		open = append(open, b)
	}
	a.mu.Unlock()
	for _, b := range open {
		a.expire(b, time.Time{}, jetstream.ErrJetStreamPublisherClosed)
	}
	if pub != nil {
		_ = pub.Close()
	}
}
