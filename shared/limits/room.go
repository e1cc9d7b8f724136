package limits

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// The waiting room of a concurrency limit.
//
// A task whose concurrency limit is full (the type's, or its key's) is
// parked in the limit's waiting room, a held subject of the task stream
// that no worker consumes: spool.held.=.<type> for the type's limit,
// spool.held.=<k>.<type> for key K's (<k> = base64url(K), as for ordered
// keys). "=" never occurs in a base64url key token, so a room never
// meets the held subject of an ordered or fair key. The parked copy
// carries the task subject in Spool-Held-Target, like a held task of an
// ordered key, and the delivery is acked: a waiting task costs no
// delivery, no attempt and no pull.
//
// A slot is handed on, not freed, while its room has tasks: the worker
// releasing a slot reads the room's oldest task (one direct get), writes
// the slot over to it (compare-and-set at the revision it holds), and
// releases the task to its task subject with the slot's key and new
// revision (Spool-Slot); the worker that receives it takes the slot over
// with a compare-and-set at that revision. A task arriving meanwhile
// finds the limit full and waits behind the room's tasks, so the room
// keeps arrival order and a waiting task is parked and released once. A
// task takes its key's slot before the type's, and keeps its key's slot
// (in Spool-Slot) while it waits in the type's room: it then waits in
// each room at most once.
//
// When the room is empty the slot is deleted, and the room is read again
// after the delete; a parker, after its publish, takes any slot it sees
// free and hands it to the room's oldest task. So neither side misses
// the other; a sweep of the held subjects by every worker (about every
// 5 s) starts the rooms whose wake-up was lost (a slot expired with its
// killed worker, a rule raised or lifted).

// RoomToken returns the held-subject token of the waiting room of the
// type's concurrency limit (key empty) or of key's: "=" followed by the
// key's token.
func RoomToken(key string) string { return "=" + EncodeKey(key) }

// ParseRoomToken reports whether a held-subject token is a waiting
// room's, and whose (key empty: the type's limit).
func ParseRoomToken(token string) (key string, ok bool) {
	enc, ok := strings.CutPrefix(token, "=")
	if !ok {
		return "", false
	}
	key, err := DecodeKey(enc)
	return key, err == nil
}

// Room returns the waiting room of the type's concurrency limit (key
// empty) or of key's.
func Room(names spool.Names, typ, key string) string {
	return names.HeldSubject(RoomToken(key), typ)
}

// RoomOf returns the waiting room a slot key's slots hand on to; ok is
// false for a key that is not a slot.
func RoomOf(names spool.Names, slotKey string) (room, typ, key string, ok bool) {
	typ, enc, _, ok := ParseSlotKey(slotKey)
	if !ok {
		return "", "", "", false
	}
	if key, ok = ParseRoomToken("=" + enc); !ok {
		return "", "", "", false
	}
	return names.HeldSubject("="+enc, typ), typ, key, true
}

// Unhold turns a held message (a parked task of an ordered key or of a
// waiting room, read by a direct get) into the copy to publish on its
// task subject: its headers without Spool-Held-Target and the headers the
// direct get added, with Spool-Task-Id set. Slots it holds while it waits
// (Spool-Slot) stay.
func Unhold(m *jetstream.RawStreamMsg) (*nats.Msg, string, error) {
	target := m.Header.Get(spool.HeaderHeldTarget)
	if target == "" {
		return nil, "", fmt.Errorf("held task %d on %s has no %s", m.Sequence, m.Subject, spool.HeaderHeldTarget)
	}
	h := nats.Header{}
	for k, v := range m.Header {
		h[k] = v
	}
	h.Del(spool.HeaderHeldTarget)
	// A direct get adds the stored message's place (Nats-Subject,
	// Nats-Sequence, ...) to its headers; the released copy must not carry
	// the held copy's, or a direct get of it reads the held subject.
	for _, k := range directGetHeaders {
		h.Del(k)
	}
	id := spool.TaskID(m.Header, m.Sequence)
	h.Set(spool.HeaderTaskID, id)
	// A task a producer held for its key's turn was enqueued when its
	// held copy was stored.
	spool.KeepEnqueuedAt(h, m.Time)
	return &nats.Msg{Subject: target, Header: h, Data: m.Data}, id, nil
}

// Grant is a concurrency slot handed to a task (Spool-Slot): the slot's
// lease key and the revision its holder wrote last.
type Grant struct {
	Slot string
	Rev  uint64
}

// AddGrant adds the grant of slot g to a task's headers.
func AddGrant(h nats.Header, g Grant) {
	h.Add(spool.HeaderSlot, g.Slot+" "+strconv.FormatUint(g.Rev, 10))
}

// Grants reads the slots a task was handed; malformed values are left
// out.
func Grants(h nats.Header) []Grant {
	var out []Grant
	for _, v := range h.Values(spool.HeaderSlot) {
		slot, r, ok := strings.Cut(v, " ")
		if !ok {
			continue
		}
		rev, err := strconv.ParseUint(r, 10, 64)
		if err != nil || rev == 0 {
			continue
		}
		if _, _, _, ok := ParseSlotKey(slot); ok {
			out = append(out, Grant{Slot: slot, Rev: rev})
		}
	}
	return out
}
