package spool

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendResult appends doc encoded as json.Marshal encodes it, without
// reflection: a worker writes one or two documents per task and an event or two, and
// reflection plus the stack growth of json.Marshal's recursion in a fresh
// attempt goroutine were the largest CPU cost of a fast task. One
// difference is wanted: Result is written verbatim (json.Marshal would
// compact it and escape <, > and &), so the stored output is the handler's
// bytes. ok is false when doc holds something this encoder leaves to
// json.Marshal for its error (a time json.Marshal rejects, an invalid
// priority).
func AppendResult(b []byte, doc *Result) (_ []byte, ok bool) {
	if !doc.Priority.Valid() || doc.CancelledBy != "" || doc.CancelReason != "" || doc.Progress != nil || doc.Snoozes != 0 {
		return nil, false
	}
	b = append(b, `{"id":`...)
	b = appendString(b, doc.ID)
	b = append(b, `,"type":`...)
	b = appendString(b, doc.Type)
	b = append(b, `,"priority":"`...)
	b = append(b, doc.Priority.String()...)
	b = append(b, `","state":`...)
	b = appendString(b, string(doc.State))
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(doc.Attempts), 10)
	if len(doc.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, doc.Result...)
		if doc.ResultEncoding != "" {
			b = append(b, `,"result_encoding":`...)
			b = appendString(b, doc.ResultEncoding)
		}
	}
	if doc.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, doc.Error)
	}
	if doc.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, string(doc.Reason))
	}
	if doc.NextAttempt != nil {
		if b, ok = appendTime(append(b, `,"next_attempt_at":`...), *doc.NextAttempt); !ok {
			return nil, false
		}
	}
	if b, ok = appendTime(append(b, `,"enqueued_at":`...), doc.EnqueuedAt); !ok {
		return nil, false
	}
	if doc.HandedBackAt != nil {
		if b, ok = appendTime(append(b, `,"handed_back_at":`...), *doc.HandedBackAt); !ok {
			return nil, false
		}
	}
	if doc.StartedAt != nil {
		if b, ok = appendTime(append(b, `,"started_at":`...), *doc.StartedAt); !ok {
			return nil, false
		}
	}
	if doc.FinishedAt != nil {
		if b, ok = appendTime(append(b, `,"finished_at":`...), *doc.FinishedAt); !ok {
			return nil, false
		}
	}
	if doc.Worker != "" {
		b = append(b, `,"worker":`...)
		b = appendString(b, doc.Worker)
	}
	if doc.TraceParent != "" {
		b = append(b, `,"traceparent":`...)
		b = appendString(b, doc.TraceParent)
	}
	if doc.Replays != 0 {
		b = append(b, `,"replays":`...)
		b = strconv.AppendInt(b, int64(doc.Replays), 10)
	}
	if doc.ReplayedAt != nil {
		if b, ok = appendTime(append(b, `,"replayed_at":`...), *doc.ReplayedAt); !ok {
			return nil, false
		}
	}
	if doc.ResultDiscarded {
		b = append(b, `,"result_discarded":true`...)
	}
	return append(b, '}'), true
}

// appendString appends s as a JSON string exactly as json.Marshal writes
// it: ", \ and control characters escaped (\b, \f, \n, \r, \t short), <, > and &
// as \u003c, \u003e, \u0026, U+2028 and U+2029 escaped, invalid UTF-8
// replaced by U+FFFD. Strings of printable ASCII take the fast path.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hex = "0123456789abcdef"

// appendTime appends t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds, quoted); ok is false for years it rejects.
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return nil, false
	}
	b = append(b, '"')
	b = AppendTime(b, t)
	return append(b, '"'), true
}
