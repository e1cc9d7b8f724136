package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// Record is one message the observer saw, in the order the server
// delivered them to it: the messages of one publisher keep their order.
type Record struct {
	Idx     int
	At      time.Time
	Subject string
	Header  nats.Header
	Data    []byte
}

// Observer listens on its own connection to what a worker publishes: acks,
// result, unique-key and cancel writes, dead letters and events. Every
// subscription feeds one channel from the connection's read loop, so the
// records keep the order in which the server sent them; callbacks would
// run one goroutine per subscription and lose it.
type Observer struct {
	nc      *nats.Conn
	names   spool.Names
	msgs    chan *nats.Msg
	done    chan struct{}
	mu      sync.Mutex
	recs    []Record
	changed chan struct{}
}

// observerBuffer is how many messages may wait for the recorder; past it
// the connection reports a slow consumer and drops messages.
const observerBuffer = 1 << 16

func newObserver(url string, names spool.Names) (*Observer, error) {
	nc, err := nats.Connect(url, nats.Name("spool-conformance observer"))
	if err != nil {
		return nil, fmt.Errorf("connecting the observer: %w", err)
	}
	o := &Observer{nc: nc, names: names, msgs: make(chan *nats.Msg, observerBuffer), done: make(chan struct{}), changed: make(chan struct{})}
	for _, subj := range []string{
		"$JS.ACK.>",
		"$KV." + names.ResultsBucket() + ".>",
		"$KV." + names.UniqueBucket() + ".>",
		names.CancelFilter(),
		names.DLQFilter(),
		names.Prefix() + ".events.>",
	} {
		if _, err := nc.ChanSubscribe(subj, o.msgs); err != nil {
			nc.Close()
			return nil, fmt.Errorf("subscribing the observer to %s: %w", subj, err)
		}
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("subscribing the observer: %w", err)
	}
	go o.run()
	return o, nil
}

func (o *Observer) close() {
	o.nc.Close()
	close(o.done)
}

// run records the messages in the order they arrived.
func (o *Observer) run() {
	for {
		select {
		case m := <-o.msgs:
			o.record(m)
		case <-o.done:
			return
		}
	}
}

func (o *Observer) record(m *nats.Msg) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.recs = append(o.recs, Record{Idx: len(o.recs), At: time.Now(), Subject: m.Subject, Header: m.Header, Data: m.Data})
	close(o.changed)
	o.changed = make(chan struct{})
}

// snapshot returns the records so far and a channel closed on the next.
func (o *Observer) snapshot() ([]Record, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.recs[:len(o.recs):len(o.recs)], o.changed
}

// wait calls check with every record seen until it returns nil or ctx
// ends; then the error says what check last missed.
func (o *Observer) wait(ctx context.Context, check func([]Record) error) error {
	for {
		recs, changed := o.snapshot()
		err := check(recs)
		if err == nil {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ctx.Err(), err)
		}
	}
}

// Ack is one message a worker sent on a task's ack subject.
type Ack struct {
	Record
	Delivered uint64
	Body      string
}

// Kind is the ack's verb: +ACK, -NAK, +WPI, +TERM or +NXT.
func (a Ack) Kind() string {
	verb, _, _ := strings.Cut(a.Body, " ")
	if verb == "" {
		return "+ACK" // an empty body acks
	}
	return verb
}

// acksOf picks the acks of the task stored at seq on stream.
func acksOf(recs []Record, stream string, seq uint64) []Ack {
	var out []Ack
	for _, r := range recs {
		if !strings.HasPrefix(r.Subject, "$JS.ACK.") {
			continue
		}
		md, err := jsproto.ParseAckSubject(r.Subject)
		if err != nil || md.Stream != stream || md.Sequence.Stream != seq {
			continue
		}
		out = append(out, Ack{Record: r, Delivered: md.NumDelivered, Body: string(r.Data)})
	}
	return out
}

// Doc is one result-document write the observer saw.
type Doc struct {
	Record
	Result spool.Result
	// Op is the KV-Operation header: empty for a put, DEL or PURGE.
	Op string
}

// docsOf picks the writes of id's result document.
func (o *Observer) docsOf(recs []Record, id string) []Doc {
	subj := o.names.ResultSubject(id)
	var out []Doc
	for _, r := range recs {
		if r.Subject != subj {
			continue
		}
		d := Doc{Record: r, Op: r.Header.Get("KV-Operation")}
		if d.Op == "" {
			_ = json.Unmarshal(r.Data, &d.Result) // a write that is not a document shows as a zero Result
		}
		out = append(out, d)
	}
	return out
}

// eventsOf picks the events of task id, by kind in order.
func (o *Observer) eventsOf(recs []Record, id string) []string {
	prefix := o.names.Prefix() + ".events."
	var out []string
	for _, r := range recs {
		rest, ok := strings.CutPrefix(r.Subject, prefix)
		if !ok {
			continue
		}
		tok := strings.SplitN(rest, ".", 4)
		if len(tok) == 4 && tok[2] == id {
			out = append(out, tok[0])
		}
	}
	return out
}

// publish stores a task on its task subject with its id in Nats-Msg-Id, as
// a raw producer does, and returns its stream sequence.
func (k *Kit) publish(ctx context.Context, p spool.Priority, typ, id string, payload []byte, hdr nats.Header) (uint64, error) {
	subj, err := k.names.TaskSubject(p, typ)
	if err != nil {
		return 0, err
	}
	m := nats.NewMsg(subj)
	m.Data = payload
	for name, vals := range hdr {
		m.Header[name] = vals
	}
	m.Header.Set(spool.HeaderMsgID, id)
	ack, err := k.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("publishing task %s: %w", id, err)
	}
	return ack.Sequence, nil
}

// doc reads id's result document; found is false when there is none.
func (k *Kit) doc(ctx context.Context, id string) (r spool.Result, rev uint64, found bool, err error) {
	kv, err := k.js.KeyValue(ctx, k.names.ResultsBucket())
	if err != nil {
		return r, 0, false, err
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return r, 0, false, nil
	}
	if err != nil {
		return r, 0, false, fmt.Errorf("reading the result document of %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return r, e.Revision(), true, fmt.Errorf("the result document of %s is not a document: %w: %s", id, err, e.Value())
	}
	return r, e.Revision(), true, nil
}

// waitState polls id's result document until its state is want.
func (k *Kit) waitState(ctx context.Context, id string, want spool.State) (spool.Result, error) {
	var r spool.Result
	err := poll(ctx, 50*time.Millisecond, func() error {
		var found bool
		var err error
		if r, _, found, err = k.doc(ctx, id); err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("task %s has no result document, want %s", id, want)
		}
		if r.State != want {
			return fmt.Errorf("task %s is %s, want %s (error %q)", id, r.State, want, r.Error)
		}
		return nil
	})
	return r, err
}

// taskStored reports whether the task stream still holds the message at
// seq.
func (k *Kit) taskStored(ctx context.Context, seq uint64) (bool, error) {
	s, err := k.js.Stream(ctx, k.names.TaskStream())
	if err != nil {
		return false, err
	}
	_, err = s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

// taskMsg reads the stored task at seq.
func (k *Kit) taskMsg(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	s, err := k.js.Stream(ctx, k.names.TaskStream())
	if err != nil {
		return nil, err
	}
	return s.GetMsg(ctx, seq)
}

// deadLetter finds the stored dead letter of task id.
func (k *Kit) deadLetter(ctx context.Context, id string) (*jetstream.RawStreamMsg, error) {
	s, err := k.js.Stream(ctx, k.names.DLQStream())
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m.Header.Get(spool.HeaderTaskID) == id {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no dead letter of %s in %s", id, k.names.DLQStream())
}

// consumerFor finds the consumer on the task stream whose filter matches
// subj.
func (k *Kit) consumerFor(ctx context.Context, subj string) (*jetstream.ConsumerInfo, error) {
	s, err := k.js.Stream(ctx, k.names.TaskStream())
	if err != nil {
		return nil, err
	}
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		filters := append([]string{ci.Config.FilterSubject}, ci.Config.FilterSubjects...)
		for _, f := range filters {
			if f != "" && spool.MatchType(f, subj) {
				return ci, nil
			}
		}
	}
	if err := l.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no consumer on %s delivers %s", k.names.TaskStream(), subj)
}
