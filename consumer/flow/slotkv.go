package flow

import (
	"context"
	"errors"
	"fmt"
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

// createSlotKey creates slot key k with value and the slot TTL. It writes
// at the revision of the delete marker this Limiter wrote last for k, or,
// knowing none, at revision 0 (k has no entry): one request when k is
// free. When k has an entry after all, it reads it: a delete marker
// (another worker's, or the server's when a marker expired) is written
// over at its revision, anything else means k is held. It fails with
// jetstream.ErrKeyExists when k is held.
func (l *Limiter) createSlotKey(ctx context.Context, k string, value []byte) (uint64, error) {
	l.mu.Lock()
	seq := l.markers[k]
	delete(l.markers, k)
	l.mu.Unlock()
	rev, err := l.put(ctx, k, value, seq, l.ttl)
	if err == nil || !isWrongLastSeq(err) {
		return rev, err
	}
	last, free, err := l.lastSlotEntry(ctx, k)
	if err != nil {
		return 0, err
	}
	if !free {
		return 0, jetstream.ErrKeyExists
	}
	rev, err = l.put(ctx, k, value, last, l.ttl)
	if isWrongLastSeq(err) {
		return 0, jetstream.ErrKeyExists
	}
	return rev, err
}

// lastSlotEntry reads the last entry of slot key k: its revision (0 when
// k has none), and whether k is free (no entry, or a delete marker).
func (l *Limiter) lastSlotEntry(ctx context.Context, k string) (rev uint64, free bool, err error) {
	l.mu.Lock()
	st := l.slotStream
	l.mu.Unlock()
	if st == nil {
		if st, err = l.js.Stream(ctx, "KV_"+l.names.LeasesBucket()); err != nil {
			return 0, false, fmt.Errorf("binding the leases stream: %w", err)
		}
		l.mu.Lock()
		l.slotStream = st
		l.mu.Unlock()
	}
	m, err := st.GetLastMsgForSubject(ctx, l.subj+k)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, true, nil // expired meanwhile
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading slot %q: %w", k, err)
	}
	op := m.Header.Get("KV-Operation")
	free = op == "DEL" || op == "PURGE" || m.Header.Get(jetstream.MarkerReasonHeader) != ""
	return m.Sequence, free, nil
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
