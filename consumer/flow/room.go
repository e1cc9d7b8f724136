package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// Waiting rooms of the concurrency limits (shared/limits, Room): a task
// whose limit is full is parked there, and a slot is handed on to the
// room's oldest task instead of being freed.

// ErrNoRooms: the task stream has no held subjects (provisioned before
// ordered keys), so a task of a full concurrency limit cannot wait in a
// room; hand it back instead.
var ErrNoRooms = errors.New("the task stream has no held subjects for waiting rooms")

// pumpMax bounds the tasks one pump releases (a rule lifted releases the
// rest at the next sweep).
const pumpMax = 1000

// roomLockStripes is the number of local room locks of a Limiter.
const roomLockStripes = 64

// lockRoom takes the local lock of room and returns its unlock: the
// releasers of one room in this process take turns, so they do not all
// read the same oldest task and release it over each other (the stream's
// duplicate window would drop all but one copy, after a write each).
// Other processes still race; the duplicate window settles it.
func (l *Limiter) lockRoom(room string) func() {
	h := fnv.New32a()
	h.Write([]byte(room))
	mu := &l.roomLocks[h.Sum32()%roomLockStripes]
	mu.Lock()
	return mu.Unlock
}

// Grant is a concurrency slot handed to a task (Spool-Slot): as it left
// a waiting room, or kept while it waited in its type's room.
type Grant = limits.Grant

// GrantsOf reads the slots a task was handed.
func GrantsOf(h nats.Header) []Grant { return limits.Grants(h) }

// CanPark reports whether a task of a full concurrency limit can wait in
// the limit's waiting room (the task stream has the held subjects). A nil
// Limiter cannot.
func (l *Limiter) CanPark() bool { return l != nil && l.tasks != nil }

// Park puts msg, a task message for its task subject, in the waiting room
// of the concurrency limit that turned it away (denied.Limit
// "concurrency", or "key_concurrency" for key's), with msgID as its
// Nats-Msg-Id so a retried park stores one copy, and the slots it keeps
// while it waits (denied.Kept). The caller acks the delivery once Park
// returned nil, and then calls Wake; if Park fails, it drops the kept
// slots (Drop).
func (l *Limiter) Park(ctx context.Context, denied *DeniedError, key, msgID string, msg *nats.Msg) error {
	if !l.CanPark() {
		return ErrNoRooms
	}
	if denied.Limit != "key_concurrency" {
		key = ""
	}
	m := &nats.Msg{Subject: limits.Room(l.names, denied.Type, key), Header: nats.Header{}, Data: msg.Data}
	for k, v := range msg.Header {
		m.Header[k] = v
	}
	m.Header.Del(spool.HeaderSlot)
	for _, g := range denied.Kept {
		limits.AddGrant(m.Header, g)
	}
	m.Header.Set(spool.HeaderHeldTarget, msg.Subject)
	m.Header.Set(spool.HeaderMsgID, msgID)
	if _, err := l.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("parking a task of %q in %s: %w", denied.Type, m.Subject, err)
	}
	l.seen(m.Subject, true)
	l.mu.Lock()
	l.statsLocked(denied.Type).Parked[denied.Limit]++
	l.mu.Unlock()
	return nil
}

// Wake hands a slot of the limit that turned a task away to the oldest
// task of its waiting room, if a slot is free, now and a few times
// shortly after (wakeLater): a parker calls it after its park, so a slot
// freed while it parked is not left unused (its releaser may not have
// looked at the room).
func (l *Limiter) Wake(ctx context.Context, denied *DeniedError, key string) {
	if denied.Limit != "key_concurrency" {
		key = ""
	}
	l.Pump(ctx, denied.Type, key)
	l.releasing.Add(1)
	go l.wakeLater(denied.Type, key)
}

// wakeAgain are the delays, one after the other, after which a parker
// looks again for a free slot for its room: a releaser that had not seen
// the room holding tasks frees its slot without reading the room, and the
// free reaches this worker's view of the slots a moment later. The sweep
// of held subjects is the last resort.
var wakeAgain = []time.Duration{50 * time.Millisecond, 250 * time.Millisecond, time.Second}

// wakeLater pumps the room of typ's limit (key's when not empty) after
// each of wakeAgain, until Close starts. A look while the view shows
// every slot taken costs no round trip.
func (l *Limiter) wakeLater(typ, key string) {
	defer l.releasing.Done()
	for _, d := range wakeAgain {
		t := time.NewTimer(d)
		select {
		case <-l.closing:
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.io)
		l.Pump(ctx, typ, key)
		cancel()
	}
}

// Pump releases the oldest tasks of the waiting room of typ's
// concurrency limit (key empty) or of key's while the limit has a free
// slot, each with the slot it took; without such a limit in force (the
// rule lifted) it releases them all. The sweep of held subjects calls it
// for every room with tasks.
func (l *Limiter) Pump(ctx context.Context, typ, key string) {
	if !l.CanPark() {
		return
	}
	room := limits.Room(l.names, typ, key)
	for range pumpMax {
		if !l.pumpOne(ctx, room, typ, key) {
			return
		}
	}
}

// pumpOne releases the oldest task of room with a free slot (or without
// one when no limit is in force); false when it released none.
func (l *Limiter) pumpOne(ctx context.Context, room, typ, key string) bool {
	n := l.slotsOf(typ, key)
	if n > 0 && l.viewFull(typ, key, n) {
		// No round trip while the view shows every slot taken.
		return false
	}
	unlock := l.lockRoom(room)
	defer unlock()
	m, err := l.nextWaiting(ctx, room)
	if err != nil || m == nil {
		if err != nil {
			l.log.Warn("reading a waiting room", "room", room, "error", err)
		}
		return false
	}
	if n == 0 {
		if _, err := l.releaseWaiting(ctx, m, "", 0); err != nil {
			l.log.Warn("releasing a task of a lifted limit", "room", room, "error", err)
			return false
		}
		return true
	}
	value, err := l.holderOf(m)
	if err != nil {
		l.log.Warn("releasing a waiting task", "room", room, "error", err)
		return false
	}
	lease := &Lease{l: l, typ: typ, value: value}
	limit := "concurrency"
	if key != "" {
		limit = "key_concurrency"
	}
	ok, err := l.scanSlots(ctx, typ, key, n, value, lease, limit)
	if err != nil {
		l.log.Warn("taking a slot for a waiting task", "room", room, "error", err)
	}
	if !ok {
		return false
	}
	s := lease.slots[0]
	// Whether the room emptied meanwhile or not, the loop's next turn
	// looks again.
	l.give(ctx, room, s.key, s.rev, m)
	return true
}

// viewFull reports whether the view shows all n slots of the limit (typ,
// key) taken.
func (l *Limiter) viewFull(typ, key string, n int) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range n {
		if until, ok := l.taken[limits.SlotKey(typ, key, i)]; !ok || now.After(until) {
			return false
		}
	}
	return true
}

// slotsOf is the size of typ's concurrency limit (key empty) or of its
// per-key limit: 0 when none is in force.
func (l *Limiter) slotsOf(typ, key string) int {
	rule, ok := l.Rule(typ)
	switch {
	case !ok:
		return 0
	case key == "":
		return rule.Concurrency
	default:
		return rule.KeyLimit(key).Concurrency
	}
}

// handOn passes slot k, held at revision rev, on to the oldest task of
// its waiting room, or deletes it when the room is empty (and then pumps
// the room if a task arrived meanwhile).
func (l *Limiter) handOn(ctx context.Context, k string, rev uint64) {
	room, typ, key, ok := limits.RoomOf(l.names, k)
	if !ok || !l.CanPark() {
		l.deleteSlot(ctx, k, rev)
		return
	}
	unlock := l.lockRoom(room)
	var again bool
	if l.roomBusy(room) {
		again = l.give(ctx, room, k, rev, nil)
	} else {
		// Not seen holding tasks lately: free the slot without reading
		// the room. A task parked meanwhile is found by its parker, who
		// looks again for a free slot shortly after its park (Wake).
		l.deleteSlot(ctx, k, rev)
	}
	unlock()
	if again {
		l.Pump(ctx, typ, key)
	}
}

// give hands slot k (held at rev) to first, or to the oldest task of room
// when first is nil, skipping tasks released already. With the room
// empty it frees the slot (free). The caller holds the room's lock.
func (l *Limiter) give(ctx context.Context, room, k string, rev uint64, first *jetstream.RawStreamMsg) (lookAgain bool) {
	for m := first; ; m = nil {
		if m == nil {
			var err error
			if m, err = l.nextWaiting(ctx, room); err != nil {
				l.log.Warn("reading a waiting room; the slot is freed", "room", room, "error", err)
				break
			}
			if m == nil {
				break
			}
		}
		// The slot goes on as it is, at the revision its holder wrote:
		// the task that takes it over writes it (compare-and-set at that
		// revision), so a slot that expired meanwhile is never held twice.
		dup, err := l.releaseWaiting(ctx, m, k, rev)
		if err != nil {
			l.log.Warn("releasing a waiting task; the slot is freed", "room", room, "error", err)
			break
		}
		if !dup {
			return false
		}
		// Released already (a releaser stopped before deleting the held
		// copy): the slot goes to the next task.
	}
	return l.free(ctx, room, k, rev)
}

// free deletes slot k held at rev, then reads room and reports whether a
// task waits there (parked while the slot was held: the caller pumps).
func (l *Limiter) free(ctx context.Context, room, k string, rev uint64) (lookAgain bool) {
	l.deleteSlot(ctx, k, rev)
	m, err := l.nextWaiting(ctx, room)
	return err == nil && m != nil
}

// roomBusyFor is how long a room seen holding tasks counts as busy
// without being seen again.
const roomBusyFor = time.Minute

// roomBusy reports whether room was seen holding tasks lately (and not
// empty since): its releasers read it before freeing a slot.
func (l *Limiter) roomBusy(room string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.busy[room]
	return ok && time.Since(at) < roomBusyFor
}

// seen records whether room holds tasks.
func (l *Limiter) seen(room string, busy bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if busy {
		l.busy[room] = time.Now()
	} else {
		delete(l.busy, room)
	}
}

// deleteSlot frees slot k held at revision rev.
func (l *Limiter) deleteSlot(ctx context.Context, k string, rev uint64) {
	rctx, cancel := context.WithTimeout(ctx, l.io)
	err := l.deleteSlotKey(rctx, k, rev)
	cancel()
	if err != nil {
		l.log.Warn("releasing a flow-control slot failed; it frees when its TTL runs out", "slot", k, "error", err)
		return
	}
	l.mu.Lock()
	delete(l.taken, k)
	l.mu.Unlock()
}

// holderOf is the slot value naming a waiting task as its holder.
func (l *Limiter) holderOf(m *jetstream.RawStreamMsg) ([]byte, error) {
	b, err := json.Marshal(limits.Holder{Task: l.names.TaskID(m.Header, l.names.TaskStream(), m.Sequence), Worker: l.owner})
	if err != nil {
		return nil, fmt.Errorf("encoding lease holder: %w", err)
	}
	return b, nil
}

// nextWaiting reads the oldest task of room; nil when it is empty.
func (l *Limiter) nextWaiting(ctx context.Context, room string) (*jetstream.RawStreamMsg, error) {
	rctx, cancel := context.WithTimeout(ctx, l.io)
	defer cancel()
	m, err := l.tasks.GetMsg(rctx, 0, jetstream.WithGetMsgSubject(room))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		l.seen(room, false)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the oldest task of %s: %w", room, err)
	}
	l.seen(room, true)
	return m, nil
}

// releaseWaiting publishes the waiting task m on its task subject, with
// the grant of slot k at revision rev (none when k is empty), and deletes
// its held copy. dup reports a task released already (the stream's
// duplicate window dropped the copy): its grant was not delivered.
func (l *Limiter) releaseWaiting(ctx context.Context, m *jetstream.RawStreamMsg, k string, rev uint64) (dup bool, err error) {
	msg, id, err := limits.Unhold(l.names, m)
	if err != nil {
		// Not a task a worker parked: leave it for an operator.
		return false, err
	}
	if k != "" {
		limits.AddGrant(msg.Header, Grant{Slot: k, Rev: rev})
	}
	msg.Header.Set(spool.HeaderMsgID, id+"-slot-"+strconv.FormatUint(m.Sequence, 10))
	rctx, cancel := context.WithTimeout(ctx, l.io)
	ack, err := l.js.PublishMsg(rctx, msg)
	cancel()
	if err != nil {
		return false, fmt.Errorf("releasing waiting task %s to %s: %w", id, msg.Subject, err)
	}
	rctx, cancel = context.WithTimeout(ctx, l.io)
	err = l.tasks.DeleteMsg(rctx, m.Sequence)
	cancel()
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) && !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		// The next release of the room meets the copy again, and the
		// duplicate window drops it.
		l.log.Warn("deleting the held copy of a released task", "task_id", id, "error", err)
	}
	if !ack.Duplicate {
		l.mu.Lock()
		_, typ, _ := l.names.ParseHeldSubject(m.Subject)
		l.statsLocked(typ).Released++
		l.mu.Unlock()
	}
	return ack.Duplicate, nil
}

// Drop gives up slots handed to a task that will not use them (it did
// not run: parked for a pause, handed back, dead-lettered): each goes on
// to the next waiting task, or is freed. A grant that is not the slot's
// holder any more (expired, taken over already) is left alone. It does
// not wait.
func (l *Limiter) Drop(ctx context.Context, gs ...Grant) {
	if l == nil || !slices.ContainsFunc(gs, func(g Grant) bool { return g.Slot != "" }) {
		return
	}
	l.releasing.Add(1)
	go func() {
		defer l.releasing.Done()
		for _, g := range gs {
			if g.Slot != "" {
				l.handOn(context.WithoutCancel(ctx), g.Slot, g.Rev)
			}
		}
	}()
}

// adoptOne takes over for lease the slot among gs of the limit (typ,
// key), if there is one: a compare-and-set at the grant's revision, which
// also restarts its TTL. The grant is used up either way (zeroed in gs).
// It reports whether the lease holds the slot now.
func (l *Limiter) adoptOne(ctx context.Context, gs []Grant, typ, key string, lease *Lease) bool {
	for i, g := range gs {
		gt, enc, _, ok := limits.ParseSlotKey(g.Slot)
		if !ok || gt != typ || (key == "") != (enc == "") || key != "" && enc != limits.EncodeKey(key) {
			continue
		}
		gs[i] = Grant{}
		rctx, cancel := context.WithTimeout(ctx, l.io)
		rev, err := l.put(rctx, g.Slot, lease.value, g.Rev, l.ttl)
		cancel()
		if err != nil {
			// Expired and taken again meanwhile, or not written: take a
			// slot the usual way.
			l.log.Debug("taking over a granted slot", "slot", g.Slot, "error", err)
			return false
		}
		l.mu.Lock()
		l.taken[g.Slot] = time.Now().Add(l.ttl)
		l.mu.Unlock()
		lease.add(g.Slot, rev)
		return true
	}
	return false
}
