package limits

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

// Lease keys in the leases bucket. A flow-control key (any bytes) is
// written as its unpadded base64url, so every key is a valid KV key.
//
//	c.<type>.<slot>         a concurrency slot of the type, 0 <= slot < concurrency
//	kc.<type>.<key>.<slot>  a concurrency slot of one key of the type
//	r.<type>                the rate state of the type
//	kr.<type>.<key>         the rate state of one key of the type
//	q.<type>, kq.<type>.<key>  when the next task turned away by that rate
//	                           comes back (its queue)
//	cq.<type>, kcq.<type>.<key>  the same for the concurrency limit (no
//	                             longer written: its tasks wait in its
//	                             waiting room, see Room)

// Holder is the value of a concurrency slot key: who holds it.
type Holder struct {
	Task   string `json:"task"`
	Worker string `json:"worker"`
}

// SlotKey is the lease key of slot i of the type's concurrency limit, or of
// key's limit when key is not empty.
func SlotKey(typ, key string, i int) string {
	if key == "" {
		return "c." + typ + "." + strconv.Itoa(i)
	}
	return "kc." + typ + "." + EncodeKey(key) + "." + strconv.Itoa(i)
}

// SlotFilter matches every slot key of the type's limit (key empty) or of
// one key's limit.
func slotFilter(typ, key string) string {
	if key == "" {
		return "c." + typ + ".*"
	}
	return "kc." + typ + "." + EncodeKey(key) + ".*"
}

// KeySlotFilter matches every per-key slot of the type.
func keySlotFilter(typ string) string { return "kc." + typ + ".*.*" }

// RateKey is the lease key of the type's rate state, or of key's when key
// is not empty.
func RateKey(typ, key string) string {
	if key == "" {
		return "r." + typ
	}
	return "kr." + typ + "." + EncodeKey(key)
}

// EncodeKey maps a flow-control key to its lease-key token.
func EncodeKey(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// DecodeKey maps a lease-key token back to its flow-control key.
func DecodeKey(enc string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(enc)
	return string(b), err
}

// ParseSlotKey splits a slot lease key into its type, the encoded
// flow-control key (empty for a type-wide slot) and the slot number; ok is
// false for any other key.
func ParseSlotKey(k string) (typ, encKey string, slot int, ok bool) {
	perKey := strings.HasPrefix(k, "kc.")
	switch {
	case perKey:
		k = k[len("kc."):]
	case strings.HasPrefix(k, "c."):
		k = k[len("c."):]
	default:
		return "", "", 0, false
	}
	i := strings.LastIndexByte(k, '.')
	if i < 0 {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(k[i+1:])
	if err != nil || n < 0 {
		return "", "", 0, false
	}
	k = k[:i]
	if perKey {
		j := strings.LastIndexByte(k, '.')
		if j < 0 {
			return "", "", 0, false
		}
		k, encKey = k[:j], k[j+1:]
	}
	return k, encKey, n, k != ""
}

// QueueKey is the lease key of the return queue of the type's rate limit,
// or of key's when key is not empty.
func QueueKey(typ, key string) string {
	if key == "" {
		return "q." + typ
	}
	return "kq." + typ + "." + EncodeKey(key)
}

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
func roomToken(key string) string { return "=" + EncodeKey(key) }

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
	return names.HeldSubject(roomToken(key), typ)
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
