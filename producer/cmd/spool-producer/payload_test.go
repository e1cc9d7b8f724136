package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	spool "github.com/spoolq/spool/shared"
)

// TestEnqueuePayloadEncodings: --payload stores a JSON value that every
// reader shows as JSON, --payload-text stores text as given, shown as
// text, and --payload-file stores bytes, shown in base64 when they are
// not UTF-8 (the result document's rules, spool.ResultValue).
func TestEnqueuePayloadEncodings(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	file := filepath.Join(t.TempDir(), "p.bin")
	if err := os.WriteFile(file, []byte{0xff, 0}, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		typ, flag, value string
		want             []byte
		wantEncoding     string
	}{
		{"json", "--payload", "{\"to\": [1, 2]}", []byte("{\"to\": [1, 2]}"), ""},
		{"json.spaced", "--payload", " \n\"ada\"\t\n", []byte(`"ada"`), ""},
		{"text", "--payload-text", `{"a":1`, []byte(`{"a":1`), spool.ResultEncodingText},
		{"text.plain", "--payload-text", "hello\n", []byte("hello\n"), spool.ResultEncodingText},
		{"bytes", "--payload-file", file, []byte{0xff, 0}, spool.ResultEncodingBase64},
	}
	for _, tt := range tests {
		if _, err := s.cli(t, "", "enqueue", "--type", tt.typ, tt.flag, tt.value); err != nil {
			t.Fatalf("%s %q: %v", tt.flag, tt.value, err)
		}
		got := s.lastTask(t, "spool.tasks.normal."+tt.typ).Data
		if !bytes.Equal(got, tt.want) {
			t.Errorf("%s %q stored %q, want %q", tt.flag, tt.value, got, tt.want)
		}
		if _, enc := spool.ResultValue(got); enc != tt.wantEncoding {
			t.Errorf("%s %q is read with encoding %q, want %q", tt.flag, tt.value, enc, tt.wantEncoding)
		}
	}
}
