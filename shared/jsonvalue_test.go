package spool

import (
	"errors"
	"testing"
)

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	valid := []struct{ in, want string }{
		{`{"a":1}`, `{"a":1}`},
		{" [1, 2]\n", `[1, 2]`},
		{`"text"`, `"text"`},
		{`null`, `null`},
	}
	for _, tt := range valid {
		got, err := CheckJSON("the payload", []byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("CheckJSON(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	invalid := []struct{ in, want string }{
		{`{"a":1`, "the payload ends in the middle of a JSON value"},
		{`hello`, "malformed JSON at byte 1: invalid character 'h' looking for beginning of value"},
		{`{} {}`, "the payload holds more than one JSON value"},
		{`{"a":NaN}`, "malformed JSON at byte 6: invalid character 'N' looking for beginning of value"},
		{`[1,]`, "malformed JSON at byte 4: invalid character ']' looking for beginning of value"},
		{" ", "the payload is empty"},
	}
	for _, tt := range invalid {
		_, err := CheckJSON("the payload", []byte(tt.in))
		var je *JSONError
		if !errors.As(err, &je) || !errors.Is(err, ErrInvalidJSON) || err.Error() != tt.want {
			t.Errorf("CheckJSON(%q) = %v; want a *JSONError %q", tt.in, err, tt.want)
		}
	}
}

func TestDecodeJSONNamesTheField(t *testing.T) {
	t.Parallel()
	var v struct {
		N int `json:"n"`
	}
	tests := []struct{ in, field, want string }{
		{`{"n":"x"}`, "n", "n: must be a whole number, not a string"},
		{`{"m":1}`, "m", `unknown field "m"`},
		{`[]`, "", "the body must be a JSON object, not an array"},
	}
	for _, tt := range tests {
		err := DecodeJSON("the body", []byte(tt.in), &v)
		var je *JSONError
		if !errors.As(err, &je) || je.Field != tt.field || je.Msg != tt.want {
			t.Errorf("DecodeJSON(%q) = %#v; want field %q, %q", tt.in, err, tt.field, tt.want)
		}
	}
}
