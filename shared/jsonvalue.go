package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// ErrInvalidJSON: data that must be one JSON value (RFC 8259) is not, or
// does not fit the Go value it is decoded into. A *JSONError says why.
var ErrInvalidJSON = errors.New("invalid JSON")

// JSONError says why data is not the one JSON value it must be. The
// broker answers it with the code invalid_json, and spool-producer
// enqueue --payload reports it for the flag.
type JSONError struct {
	// Field is the dotted path of the object member at fault; empty when
	// the fault is not in one member (a syntax error, a second value).
	Field string
	// Msg says what is wrong, in a sentence.
	Msg string
}

func (e *JSONError) Error() string { return e.Msg }

// Unwrap returns ErrInvalidJSON.
func (e *JSONError) Unwrap() error { return ErrInvalidJSON }

// DecodeJSON decodes exactly one JSON value from data into v, refusing
// object members v has no field for. Whitespace around the value is
// allowed, as RFC 8259 allows it. what names data in the messages ("the
// body"). Every error is a *JSONError.
func DecodeJSON(what string, data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(what, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &JSONError{Msg: what + " holds more than one JSON value"}
	}
	return nil
}

// CheckJSON checks that data is exactly one JSON value, with the parser
// and the messages of DecodeJSON, and returns the value without the
// whitespace around it: what a JSON reader gives back, so a payload
// checked here is stored as JSON (ResultIsJSON) when it is valid UTF-8.
func CheckJSON(what string, data []byte) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := DecodeJSON(what, data, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// jsonError turns an error of encoding/json into a *JSONError that says
// what is wrong in JSON's words.
func jsonError(what string, err error) *JSONError {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			kind := jsonKind(typeErr.Type)
			if kind == "an object" {
				kind = "a JSON object"
			}
			return &JSONError{Msg: fmt.Sprintf("%s must be %s, not %s", what, kind, article(typeErr.Value))}
		}
		return &JSONError{Field: typeErr.Field,
			Msg: fmt.Sprintf("%s: must be %s, not %s", typeErr.Field, jsonKind(typeErr.Type), article(typeErr.Value))}
	case errors.As(err, &syntaxErr):
		return &JSONError{Msg: fmt.Sprintf("malformed JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))}
	case errors.Is(err, io.EOF):
		return &JSONError{Msg: what + " is empty"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &JSONError{Msg: what + " ends in the middle of a JSON value"}
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		field := strings.Trim(name, `"`)
		return &JSONError{Field: field, Msg: fmt.Sprintf("unknown field %q", field)}
	}
	return &JSONError{Msg: msg}
}

// jsonKind says which JSON value a Go type takes, in JSON's words.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another JSON value"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON value"
}

// article puts "a" or "an" before the JSON kind encoding/json reports
// ("string", "number -1.5", "array", "object").
func article(v string) string {
	kind, _, _ := strings.Cut(v, " ")
	switch kind {
	case "array", "object":
		return "an " + kind
	case "bool":
		return "true or false"
	}
	return "a " + kind
}
