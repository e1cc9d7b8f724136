package limits

import (
	"encoding/base64"
	"strconv"
	"strings"
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
func SlotFilter(typ, key string) string {
	if key == "" {
		return "c." + typ + ".*"
	}
	return "kc." + typ + "." + EncodeKey(key) + ".*"
}

// KeySlotFilter matches every per-key slot of the type.
func KeySlotFilter(typ string) string { return "kc." + typ + ".*.*" }

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

// SlotQueueKey is the lease key of the return queue of the type's
// concurrency limit, or of key's when key is not empty. Workers no longer
// write it (a task of a full concurrency limit waits in the limit's
// waiting room, Room); keys written by earlier workers expire.
func SlotQueueKey(typ, key string) string {
	if key == "" {
		return "cq." + typ
	}
	return "kcq." + typ + "." + EncodeKey(key)
}
