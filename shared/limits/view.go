package limits

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// ErrNoBucket: the limits bucket does not exist (the topology is not
// provisioned, or predates flow control).
var ErrNoBucket = errors.New("no flow-control rules bucket")

// View is a live copy of a deployment's rules, kept by watching the
// limits bucket: a put or delete is in force within a second. Safe for
// concurrent use.
type View struct {
	mu  sync.Mutex
	set Set

	cancel context.CancelFunc
	w      jetstream.KeyWatcher
	done   chan struct{}
}

// Change reports one change of the rules a View applies: the rule put
// (rule non-nil), the rule named name deleted (rule nil, err nil), or a
// document that does not hold (err; the last good rule stays in force).
type Change func(name string, rule *Rule, err error)

// Watch loads every rule stored (each in force when Watch returns) and
// keeps the View current until Stop; ctx bounds the load. onChange, if
// not nil, is called for each change, loaded ones included. ErrNoBucket
// when the bucket does not exist.
//
// On a cluster the watch's consumer may be placed on a replica still
// catching up after a restart, whose initial values end early without an
// error: a rule missing from them would go unenforced until the replica
// caught up. So Watch first asks the bucket's leader (a stream info
// request, which only the leader answers) for its last revision, and
// returns once the view has seen it.
func Watch(ctx context.Context, js jetstream.JetStream, names spool.Names, onChange Change) (*View, error) {
	kv, err := js.KeyValue(ctx, names.LimitsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: bucket %q", ErrNoBucket, names.LimitsBucket())
	}
	if err != nil {
		return nil, fmt.Errorf("binding bucket %q: %w", names.LimitsBucket(), err)
	}
	last, err := leaderRevision(ctx, js, names.LimitsBucket())
	if err != nil {
		return nil, err
	}
	if onChange == nil {
		onChange = func(string, *Rule, error) {}
	}
	// The watch lives until Stop, past ctx.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching bucket %q: %w", names.LimitsBucket(), err)
	}
	v := &View{cancel: cancel, w: w, done: make(chan struct{})}
	gone := func(ctx context.Context) (bool, error) {
		return leaderLacks(ctx, js, names.LimitsBucket(), last)
	}
	if err := v.load(ctx, w.Updates(), last, gone, onChange); err != nil {
		cancel()
		_ = w.Stop()
		return nil, fmt.Errorf("loading flow-control rules: %w", err)
	}
	go func() {
		defer close(v.done)
		for e := range w.Updates() {
			if e != nil {
				v.apply(e, onChange)
			}
		}
	}()
	return v, nil
}

// leaderRevision is the revision of the last change the bucket's leader
// has stored (0 when it holds none).
func leaderRevision(ctx context.Context, js jetstream.JetStream, bucket string) (uint64, error) {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return 0, fmt.Errorf("reading the state of bucket %q: %w", bucket, err)
	}
	st := s.CachedInfo().State
	if st.Msgs == 0 {
		return 0, nil // purged: nothing to wait for
	}
	return st.LastSeq, nil
}

// leaderLacks reports whether the bucket's leader no longer holds the
// message of revision seq: a message get through the JetStream API, which
// only the leader answers (a direct get may come from a lagging replica).
func leaderLacks(ctx context.Context, js jetstream.JetStream, bucket string, seq uint64) (bool, error) {
	_, found, err := jsproto.GetMsg(ctx, js.Conn(), "KV_"+bucket, jsproto.MsgGetRequest{Seq: seq})
	if err != nil {
		return false, fmt.Errorf("reading revision %d of bucket %q: %w", seq, bucket, err)
	}
	return !found, nil
}

// load applies the watch's initial values (which end with a nil entry),
// then its updates until it has seen revision last. When the initial
// values end short of it, gone reports whether last was removed since
// (a `nats kv compact` of its delete marker): then no watch ever shows it,
// and what the initial values held is the bucket.
func (v *View) load(ctx context.Context, updates <-chan jetstream.KeyValueEntry, last uint64,
	gone func(context.Context) (bool, error), onChange Change) error {
	var seen uint64
	for initial := true; initial || seen < last; {
		select {
		case e, ok := <-updates:
			if !ok {
				return fmt.Errorf("the watch ended at revision %d of %d", seen, last)
			}
			if e != nil {
				seen = max(seen, e.Revision())
				v.apply(e, onChange)
				continue
			}
			initial = false
			if seen >= last {
				break
			}
			removed, err := gone(ctx)
			if err != nil {
				return err
			}
			if removed {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("%w (the watch had seen revision %d of the leader's %d: a replica catching up?)", ctx.Err(), seen, last)
		}
	}
	return nil
}

// apply records one change of the bucket.
func (v *View) apply(e jetstream.KeyValueEntry, onChange Change) {
	name, err := RuleName(e.Key())
	if err != nil {
		onChange(e.Key(), nil, err)
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		v.mu.Lock()
		v.set.Delete(name)
		v.mu.Unlock()
		onChange(name, nil, nil)
		return
	}
	r, err := Decode(e.Key(), e.Value())
	if err != nil {
		// Writers validate; a raw writer's bad rule keeps the last good
		// one in force rather than lifting the limit.
		onChange(name, nil, err)
		return
	}
	v.mu.Lock()
	v.set.Put(r)
	v.mu.Unlock()
	onChange(name, &r, nil)
}

// Rule returns the rule in force for typ, if any (Set.Match), with Type
// typ (Rule.For).
func (v *View) Rule(typ string) (Rule, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.set.Match(typ)
	return r.For(typ), ok
}

// Stop ends the watch. A nil *View does nothing.
func (v *View) Stop() {
	if v == nil {
		return
	}
	v.cancel()
	_ = v.w.Stop()
	<-v.done
}

// Patterns reads the pattern rules stored in the limits bucket bucket,
// without a consumer: the stream's subjects (one JetStream API request,
// paged) name the keys, and each pattern key is read with a direct get.
// For a client that looks rules up now and then (the producer) rather
// than watching them.
func Patterns(ctx context.Context, js jetstream.JetStream, bucket string) ([]Rule, error) {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("looking up bucket %q: %w", bucket, err)
	}
	prefix := "$KV." + bucket + "."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("listing the keys of bucket %q: %w", bucket, err)
	}
	var out []Rule
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, prefix)
		name, err := RuleName(key)
		if err != nil || !IsPattern(name) {
			continue
		}
		m, err := s.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("reading the limit rule %q: %w", key, err)
		}
		if op := m.Header.Get("KV-Operation"); op != "" {
			continue // deleted or purged: a marker
		}
		r, err := Decode(key, m.Data)
		if err != nil {
			continue // not in force (the workers ignore it too)
		}
		out = append(out, r)
	}
	return out, nil
}
