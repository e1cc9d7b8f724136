package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalidDocument: a document read back from a bucket (a result
// document, a workflow record, a limits rule) cannot be decoded. Something
// that does not follow the contract wrote it, for example a worker in
// another language that stored NaN as a JSON number. A *DocumentError names
// the document and where it goes wrong.
var ErrInvalidDocument = errors.New("invalid document")

// CodeInvalidDocument is the error code of ErrInvalidDocument, the same in
// the HTTP API and the CLI.
const CodeInvalidDocument = "invalid_document"

// DocumentError says which stored document cannot be decoded, and where.
// errors.Is matches ErrInvalidDocument and the decoding error behind it.
type DocumentError struct {
	// Kind is what the document is ("result document", "workflow record",
	// ...); Key is where it is stored.
	Kind, Key string
	// Field is the dotted path of the value at fault ("result",
	// "progress.value", "steps[2].name"); empty when the document is not a
	// JSON object at all.
	Field string
	// Offset is the byte offset in the document where decoding stopped;
	// -1 when the decoder does not say.
	Offset int64
	// Err is the decoding error.
	Err error
}

func (e *DocumentError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the stored %s %q cannot be read", e.Kind, e.Key)
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	if e.Offset >= 0 {
		fmt.Fprintf(&b, " at byte %d", e.Offset)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	var syntax *json.SyntaxError
	if errors.As(e.Err, &syntax) {
		b.WriteString(" (stored documents must be RFC 8259 JSON: no NaN, no Infinity)")
	}
	return b.String()
}

// Unwrap returns ErrInvalidDocument and the decoding error.
func (e *DocumentError) Unwrap() []error { return []error{ErrInvalidDocument, e.Err} }

// DecodeDocument decodes the stored document data into v, as
// json.Unmarshal does. A document it cannot decode gives a *DocumentError
// naming kind, key, the field and the byte offset.
func DecodeDocument(kind, key string, data []byte, v any) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	// An UnmarshalJSON method's own error (an unknown priority, say)
	// comes without a place.
	de := &DocumentError{Kind: kind, Key: key, Offset: -1, Err: err}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		de.Offset = syntax.Offset
		de.Field = fieldAtError(data)
	case errors.As(err, &typ):
		de.Offset, de.Field = typ.Offset, typ.Field
	}
	return de
}

// fieldAtError reads data token by token up to its syntax error and
// returns the dotted path of the value it was reading there.
func fieldAtError(data []byte) string {
	type frame struct {
		object  bool
		key     string // the current member's name (objects)
		wantKey bool   // the next token is a member name (objects)
		n       int    // elements begun (arrays)
	}
	var stack []*frame
	// begin notes that a value starts in the innermost container.
	begin := func() {
		if len(stack) > 0 && !stack[len(stack)-1].object {
			stack[len(stack)-1].n++
		}
	}
	// end notes that a value ended: an object expects a name again.
	end := func() {
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		top := (*frame)(nil)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				begin()
				stack = append(stack, &frame{object: t == '{', wantKey: t == '{'})
			default:
				stack = stack[:len(stack)-1]
				end()
			}
		case string:
			if top != nil && top.object && top.wantKey {
				top.key, top.wantKey = t, false
				continue
			}
			begin()
			end()
		default:
			begin()
			end()
		}
	}
	var path strings.Builder
	for i, f := range stack {
		last := i == len(stack)-1
		switch {
		case f.object:
			if f.key == "" || (last && f.wantKey) {
				return path.String() // at a member name: the object itself
			}
			if path.Len() > 0 {
				path.WriteByte('.')
			}
			path.WriteString(f.key)
		default:
			idx := f.n - 1
			if last {
				idx = f.n // the element that failed had not begun
			}
			path.WriteString("[" + strconv.Itoa(idx) + "]")
		}
	}
	return path.String()
}
