package parking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// ErrNotProvisioned: the pause bucket does not exist (a deployment
// provisioned before type pauses). The worker runs without them.
var ErrNotProvisioned = errors.New("type-pause bucket not provisioned")

// DefaultDrainEvery is how often a Parking looks for parked tasks of types
// that are not paused (besides at every resume it hears of).
const DefaultDrainEvery = 2 * time.Second

// Config is what a Parking needs.
type Config struct {
	JS   jetstream.JetStream
	Conn *nats.Conn
	// Tasks is the task stream, bound.
	Tasks jetstream.Stream
	Names spool.Names
	// IOTimeout bounds each request (per try: at most
	// jsproto.DefaultPerTry).
	IOTimeout time.Duration
	// DrainEvery is how often parked tasks of resumed types are looked
	// for; 0 means DefaultDrainEvery.
	DrainEvery time.Duration
	Logger     *slog.Logger
}

// Parking is a worker's view of the paused types and its share of moving
// parked tasks back. Create it with New, end it with Close.
type Parking struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	tasks  jetstream.Stream
	names  spool.Names
	kv     jetstream.KeyValue
	prefix string // $KV.<bucket>.
	perTry time.Duration
	every  time.Duration
	log    *slog.Logger
	// canPark is set when the task stream holds the parked subjects (a
	// stream provisioned before type pauses does not).
	canPark bool

	sub *nats.Subscription
	// base carries the values of New's ctx; Close cancels it.
	base       context.Context
	cancelBase context.CancelFunc
	kick       chan struct{} // capacity 1: drain now
	stop       chan struct{}
	done       sync.WaitGroup

	mu     sync.Mutex
	paused map[string]spool.TypePause
	// changes counts the changes heard on the subscription; changed is the
	// count at each type's last change, so a listing never undoes a
	// change heard while it ran.
	changes    uint64
	changed    map[string]uint64
	reconnects uint64
}

// New binds the pause bucket, lists the paused types and starts following
// changes and draining. ctx bounds start-up only.
func New(ctx context.Context, cfg Config) (*Parking, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DrainEvery <= 0 {
		cfg.DrainEvery = DefaultDrainEvery
	}
	p := &Parking{
		js:      cfg.JS,
		nc:      cfg.Conn,
		tasks:   cfg.Tasks,
		names:   cfg.Names,
		prefix:  strings.TrimSuffix(cfg.Names.PausedFilter(), ">"),
		perTry:  min(max(cfg.IOTimeout, 100*time.Millisecond), jsproto.DefaultPerTry),
		every:   cfg.DrainEvery,
		log:     cfg.Logger,
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		paused:  make(map[string]spool.TypePause),
		changed: make(map[string]uint64),
	}
	p.base, p.cancelBase = context.WithCancel(context.WithoutCancel(ctx))
	bind := jsproto.Tries{PerTry: p.perTry, Logger: p.log}
	err := bind.Do(ctx, "binding the type-pause bucket "+cfg.Names.PausedBucket(), func(ctx context.Context) (err error) {
		p.kv, err = cfg.JS.KeyValue(ctx, cfg.Names.PausedBucket())
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) || jsproto.NotFound(err) {
		p.cancelBase()
		return nil, fmt.Errorf("%w: bucket %q: %w", ErrNotProvisioned, cfg.Names.PausedBucket(), err)
	}
	if err != nil {
		p.cancelBase()
		return nil, err
	}
	p.canPark = slices.Contains(cfg.Tasks.CachedInfo().Config.Subjects, cfg.Names.ParkedFilter())
	// Subscribe before listing: a change published meanwhile is seen by
	// one or the other.
	if p.sub, err = cfg.Conn.Subscribe(cfg.Names.PausedFilter(), p.onMsg); err != nil {
		p.cancelBase()
		return nil, fmt.Errorf("subscribing to type pauses on %q: %w", cfg.Names.PausedFilter(), err)
	}
	p.reconnects = cfg.Conn.Stats().Reconnects
	if err := bind.Do(ctx, "listing paused types", p.load); err != nil {
		_ = p.sub.Unsubscribe()
		p.cancelBase()
		return nil, err
	}
	p.done.Add(1)
	go p.loop()
	return p, nil
}

// CanPark reports whether the task stream has the parked subjects. When it
// has not, a task of a paused type must be handed back some other way.
func (p *Parking) CanPark() bool { return p != nil && p.canPark }

// Paused reports whether typ is paused now. A nil Parking pauses nothing.
func (p *Parking) Paused(typ string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	tp, ok := p.paused[typ]
	p.mu.Unlock()
	return ok && tp.Active(time.Now())
}

// load replaces the view with the bucket's keys and documents, except for
// the types whose change was heard while it listed them.
func (p *Parking) load(ctx context.Context) error {
	p.mu.Lock()
	since := p.changes
	p.mu.Unlock()
	lister, err := p.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("listing paused types: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("listing paused types (%d so far): %w", len(keys), ctx.Err())
	}
	view := make(map[string]spool.TypePause, len(keys))
	for _, k := range keys {
		tp := spool.TypePause{Type: k}
		e, err := p.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // resumed meanwhile
		case err != nil:
			return fmt.Errorf("reading the pause of type %q: %w", k, err)
		}
		if err := json.Unmarshal(e.Value(), &tp); err != nil {
			p.log.Warn("undecodable type pause: the type counts as paused until resumed", "type", k, "error", err)
			tp = spool.TypePause{Type: k}
		}
		view[k] = tp
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for typ, tp := range view {
		if p.changed[typ] <= since {
			p.paused[typ] = tp
		}
	}
	for typ := range p.paused {
		if _, ok := view[typ]; !ok && p.changed[typ] <= since {
			delete(p.paused, typ)
		}
	}
	return nil
}

// heard records a change of typ's pause heard on the subscription (tp nil:
// resumed).
func (p *Parking) heard(typ string, tp *spool.TypePause) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes++
	p.changed[typ] = p.changes
	if tp == nil {
		delete(p.paused, typ)
		return
	}
	p.paused[typ] = *tp
}

func (p *Parking) onMsg(m *nats.Msg) {
	typ, ok := strings.CutPrefix(m.Subject, p.prefix)
	if !ok || typ == "" {
		return
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		p.heard(typ, nil)
		p.log.Info("task type resumed", "type", typ)
		p.drainSoon()
		return
	}
	// A put pauses the type whatever its body says: an undecodable one is
	// a pause without an end.
	tp := spool.TypePause{Type: typ}
	if err := json.Unmarshal(m.Data, &tp); err != nil {
		tp = spool.TypePause{Type: typ}
	}
	p.heard(typ, &tp)
	p.log.Info("task type paused", "type", typ, "by", tp.By, "reason", tp.Reason)
	if !tp.Active(time.Now()) {
		p.drainSoon()
	}
}

func (p *Parking) drainSoon() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Park publishes the copy of a task of a paused type onto its parked
// subject: every header of msg, attempt the attempts it used before this
// delivery, its first enqueue time, the subject it came from and a
// Nats-Msg-Id derived from seq
// (its stream sequence), so a retried park stores one copy. It publishes
// once (the caller retries through an election) and acks msg once Park
// returned nil.
func (p *Parking) Park(ctx context.Context, msg jetstream.Msg, pr spool.Priority, typ, id string, seq uint64, priorAttempts int) error {
	subj, err := p.names.ParkedSubject(pr, typ)
	if err != nil {
		return err
	}
	h := copyHeaders(msg.Headers())
	h.Set(spool.HeaderTaskID, id)
	h.Set(spool.HeaderPriorAttempts, strconv.Itoa(priorAttempts))
	if md, err := msg.Metadata(); err == nil {
		spool.KeepEnqueuedAt(h, md.Timestamp)
	}
	h.Set(spool.HeaderOriginalSubject, msg.Subject())
	h.Set(spool.HeaderMsgID, id+"-park-"+strconv.FormatUint(seq, 10))
	m := &nats.Msg{Subject: subj, Header: h, Data: msg.Data()}
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("parking task %s on %q: %w", id, subj, err)
	}
	return nil
}

// copyHeaders copies h without the server's own headers (Nats-*), which
// belong to the message they came with.
func copyHeaders(h nats.Header) nats.Header {
	out := make(nats.Header, len(h)+3)
	for k, vs := range h {
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			continue
		}
		out[k] = slices.Clone(vs)
	}
	return out
}

// loop drains parked tasks of types that are not paused, at every resume
// and every DrainEvery; it also lists the paused types again after a
// reconnect, when changes may have been missed.
func (p *Parking) loop() {
	defer p.done.Done()
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		case <-p.kick:
		}
		if n := p.nc.Stats().Reconnects; n != p.reconnects {
			ctx, cancel := p.ctx(4 * p.perTry)
			err := jsproto.Tries{PerTry: p.perTry}.Do(ctx, "listing paused types", p.load)
			cancel()
			if err != nil {
				p.log.Warn("listing paused types after a reconnect", "error", err)
			} else {
				p.reconnects = n
			}
		}
		if p.canPark {
			p.drain()
		}
	}
}

// ctx is a context ended by Close or after d.
func (p *Parking) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(p.base, d)
}

// drain moves the parked tasks of every type that is not paused back to
// their task subjects.
func (p *Parking) drain() {
	ctx, cancel := p.ctx(time.Minute)
	defer cancel()
	info, err := p.tasks.Info(ctx, jetstream.WithSubjectFilter(p.names.ParkedFilter()))
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			p.log.Debug("looking for parked tasks", "error", err)
		}
		return
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for s, n := range info.State.Subjects {
		if n > 0 {
			subjects = append(subjects, s)
		}
	}
	// Workers draining at once start at different types.
	rand.Shuffle(len(subjects), func(i, j int) { subjects[i], subjects[j] = subjects[j], subjects[i] })
	for _, s := range subjects {
		_, typ, err := p.names.ParseParkedSubject(s)
		if err != nil {
			p.log.Warn("parked message on a malformed subject left alone", "subject", s, "error", err)
			continue
		}
		if p.Paused(typ) {
			continue
		}
		if err := p.drainSubject(ctx, s, typ); err != nil && ctx.Err() == nil {
			p.log.Warn("moving parked tasks back", "subject", s, "error", err)
		}
	}
}

// drainSubject moves the tasks parked on subject back, oldest first, until
// none is left or typ is paused again.
func (p *Parking) drainSubject(ctx context.Context, subject, typ string) error {
	next := uint64(1)
	moved := 0
	defer func() {
		if moved > 0 {
			p.log.Info("parked tasks moved back", "type", typ, "subject", subject, "moved", moved)
		}
	}()
	for !p.Paused(typ) {
		var raw *jetstream.RawStreamMsg
		err := jsproto.Tries{PerTry: p.perTry}.Do(ctx, "reading parked tasks of "+subject, func(ctx context.Context) (err error) {
			raw, err = p.tasks.GetMsg(ctx, next, jetstream.WithGetMsgSubject(subject))
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		next = raw.Sequence + 1
		if err := p.unpark(ctx, raw); err != nil {
			return err
		}
		moved++
	}
	return nil
}

// unpark republishes a parked copy to its task subject, then deletes it.
func (p *Parking) unpark(ctx context.Context, raw *jetstream.RawStreamMsg) error {
	pr, typ, err := p.names.ParseParkedSubject(raw.Subject)
	if err != nil {
		return err
	}
	target := raw.Header.Get(spool.HeaderOriginalSubject)
	if target == "" {
		if target, err = p.names.TaskSubject(pr, typ); err != nil {
			return err
		}
	}
	h := copyHeaders(raw.Header)
	h.Del(spool.HeaderOriginalSubject)
	spool.KeepEnqueuedAt(h, raw.Time)
	id := p.names.TaskID(raw.Header, p.names.TaskStream(), raw.Sequence)
	h.Set(spool.HeaderMsgID, id+"-unpark-"+strconv.FormatUint(raw.Sequence, 10))
	m := &nats.Msg{Subject: target, Header: h, Data: raw.Data}
	err = jsproto.Tries{PerTry: p.perTry}.Do(ctx, "moving parked task "+id+" back", func(ctx context.Context) error {
		_, err := p.js.PublishMsg(ctx, m)
		return err
	})
	if err != nil {
		return err
	}
	err = jsproto.Tries{PerTry: p.perTry}.Do(ctx, "deleting the parked copy of task "+id, func(ctx context.Context) error {
		return p.tasks.DeleteMsg(ctx, raw.Sequence)
	})
	if err != nil && !jsproto.NotFound(err) && !errors.Is(err, jetstream.ErrMsgNotFound) && !isAlreadyDeleted(err) {
		// The task is queued again; the copy stays parked and the next
		// drain republishes it, which the duplicate window absorbs.
		return err
	}
	return nil
}

// isAlreadyDeleted reports a delete that found the message gone (another
// worker moved it first).
func isAlreadyDeleted(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound
}

// Close stops following pauses and draining.
func (p *Parking) Close() {
	if p == nil {
		return
	}
	close(p.stop)
	p.cancelBase()
	p.done.Wait()
	if err := p.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		p.log.Warn("unsubscribing from type pauses", "error", err)
	}
}
