package flow

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolq/spool/shared/jsproto"
)

// Freeing and taking a slot key. A KV create of a key whose last entry is
// a delete costs three requests (a write that fails, a read of the last
// entry, a write at its revision), and a concurrency slot is deleted and
// created again at every use. So the Limiter writes its deletes itself,
// keeps the revision of each delete marker it wrote, and takes the slot
// back with one compare-and-set write at that revision; when the marker
// is not the key's last entry any more, it falls back to the KV create.

// maxMarkers bounds the delete markers a Limiter remembers (keys of
// many flow-control keys): past it, it forgets them all.
const maxMarkers = 10_000

// deleteSlotKey writes the delete of slot key k if its last revision is
// still rev, and remembers the marker's revision. The marker carries the
// slot TTL: a per-key slot is seldom taken again, and a marker without a
// TTL would stay in the bucket for good, one for every key ever limited.
// When it expires the server leaves its own short-lived marker in its place.
func (l *Limiter) deleteSlotKey(ctx context.Context, k string, rev uint64) error {
	seq, err := l.write(ctx, &nats.Msg{Subject: l.subj + k, Header: nats.Header{
		"KV-Operation":                      {"DEL"},
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)},
		jetstream.MsgTTLHeader:              {l.ttl.String()},
	}})
	if err != nil {
		return err
	}
	l.mu.Lock()
	if len(l.markers) >= maxMarkers {
		clear(l.markers)
	}
	l.markers[k] = seq
	l.mu.Unlock()
	return nil
}

// createSlotKey creates slot key k with value and the slot TTL: a write at
// the revision of the delete marker this Limiter wrote last for k, else a
// KV create. It fails with jetstream.ErrKeyExists when k is held.
func (l *Limiter) createSlotKey(ctx context.Context, k string, value []byte) (uint64, error) {
	l.mu.Lock()
	seq, ok := l.markers[k]
	delete(l.markers, k)
	l.mu.Unlock()
	if ok {
		rev, err := l.put(ctx, k, value, seq, l.ttl)
		if err == nil || !isWrongLastSeq(err) {
			return rev, err
		}
	}
	return l.leases.Create(ctx, k, value, jetstream.KeyTTL(l.ttl))
}

// write publishes m, a write of a key of the leases bucket, and returns
// the revision stored. The acknowledgement is read by
// jsproto.ParsePubAck, without the reflective decode of jetstream's
// PublishMsg, and, as PublishMsg does, m is sent again while no stream
// answers (an election), within ctx.
func (l *Limiter) write(ctx context.Context, m *nats.Msg) (uint64, error) {
	for retries := 0; ; retries++ {
		resp, err := l.nc.RequestMsgWithContext(ctx, m)
		if errors.Is(err, nats.ErrNoResponders) {
			err = jetstream.ErrNoStreamResponse
		}
		var ack jsproto.PubAck
		if err == nil {
			ack, err = jsproto.ParsePubAck(resp)
		}
		if err == nil {
			return ack.Seq, nil
		}
		if !jsproto.RetryNoResponders(err, retries) {
			return 0, err
		}
		t := time.NewTimer(jsproto.NoResponderWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, err
		case <-t.C:
		}
	}
}
