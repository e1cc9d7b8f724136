package spool_test

import (
	"errors"
	"strings"
	"testing"

	spool "github.com/spoolq/spool/shared"
)

// A stored document that is not RFC 8259 JSON, or holds a value of the
// wrong type, is reported as an invalid document naming the field and
// the byte offset.
func TestDecodeDocument(t *testing.T) {
	for _, tc := range []struct {
		name, doc, field string
		offset           int64
	}{
		{"NaN result", `{"id":"t1","state":"completed","result":NaN}`, "result", 41},
		{"Infinity nested", `{"id":"t1","state":"processing","progress":{"percent":5,"value":{"x":[1,-Infinity]}}}`, "progress.value.x[1]", 74},
		{"not a document", `NaN`, "", 1},
		{"truncated", `{"id":"t1","state":`, "state", 19},
		{"wrong type", `{"id":"t1","attempts":"two"}`, "attempts", 27},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r spool.Result
			err := spool.DecodeDocument("result document", "t1", []byte(tc.doc), &r)
			var de *spool.DocumentError
			if !errors.Is(err, spool.ErrInvalidDocument) || !errors.As(err, &de) {
				t.Fatalf("err %v, want a *DocumentError", err)
			}
			if de.Kind != "result document" || de.Key != "t1" || de.Field != tc.field || de.Offset != tc.offset {
				t.Errorf("got kind %q key %q field %q offset %d, want field %q offset %d", de.Kind, de.Key, de.Field, de.Offset, tc.field, tc.offset)
			}
			if !strings.Contains(err.Error(), `result document "t1"`) {
				t.Errorf("message %q does not name the document", err)
			}
		})
	}
	var r spool.Result
	if err := spool.DecodeDocument("result document", "t1", []byte(`{"id":"t1","result":{"a":1}}`), &r); err != nil || string(r.Result) != `{"a":1}` {
		t.Fatalf("valid document: %v, %+v", err, r)
	}
}

// The Go worker stores only RFC 8259 JSON verbatim: output json.Valid
// rejects, such as NaN or Infinity, is stored as text.
func TestResultValueStrictJSON(t *testing.T) {
	for _, out := range []string{"NaN", "Infinity", "-Infinity", `{"x":NaN}`, `[1,Infinity]`, "01", `{"a":1,}`} {
		v, enc := spool.ResultValue([]byte(out))
		if enc != spool.ResultEncodingText {
			t.Errorf("%s: encoding %q, want %q", out, enc, spool.ResultEncodingText)
		}
		back, err := spool.Result{Result: v, ResultEncoding: enc}.Output()
		if err != nil || string(back) != out {
			t.Errorf("%s: output back %q, %v", out, back, err)
		}
	}
}
