package spool

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"
)

// MaxIDLen is the longest task id accepted.
const MaxIDLen = 128

// ValidateID checks a task id. An id is 1 to MaxIDLen characters of
// [A-Za-z0-9_=-]: a valid KV key and a single subject token, so it can name
// both the result key and the schedule subject spool.sched.<id>.
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidID)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidID, len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !isIDChar(id[i]) {
			return fmt.Errorf("%w: %q has %q at %d (allowed: A-Z a-z 0-9 _ - =)", ErrInvalidID, id, id[i], i)
		}
	}
	return nil
}

func isIDChar(c byte) bool {
	return isTokenChar(c) || c == '='
}

// crockford is Crockford's base32 alphabet: sortable and unambiguous.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewID returns a new 26-character task id in the ULID layout: 48 bits of
// Unix milliseconds then 80 random bits, Crockford base32. Ids made later
// sort later (to the millisecond), and every id is a valid KV key.
func NewID() string {
	return newIDAt(time.Now())
}

func newIDAt(t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails (Go 1.24+)
	// 128 bits → 26 base32 digits; the first digit carries the top 3 bits.
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
