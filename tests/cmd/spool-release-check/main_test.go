package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckRequires(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, gomod, wantErr string
	}{
		{"release version", "module x\n\nrequire (\n\tgithub.com/spoolq/spool/shared v0.1.0\n\tgithub.com/nats-io/nats.go v1.55.0\n)\n", ""},
		{"one-line require", "module x\n\nrequire github.com/spoolq/spool/shared v0.1.0\n", ""},
		{"v0.0.0", "module x\n\nrequire github.com/spoolq/spool/shared v0.0.0\n", "at v0.0.0, want the release version v0.1.0"},
		{"pseudo-version", "module x\n\nrequire (\n\tgithub.com/spoolq/spool/streams v0.0.0-00010101000000-000000000000\n)\n", "want the release version"},
		{"replace", "module x\n\nrequire github.com/spoolq/spool/shared v0.1.0\n\nreplace github.com/spoolq/spool/shared => ../shared\n", "a replace directive"},
	}
	for _, c := range cases {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "m"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "m", "go.mod"), []byte(c.gomod), 0o644); err != nil {
			t.Fatal(err)
		}
		err := checkRequires(root, "m", "v0.1.0")
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.wantErr)
		}
	}
}

func TestWithoutSpoolSums(t *testing.T) {
	t.Parallel()
	a := withoutSpoolSums([]byte("github.com/nats-io/nats.go v1 h1:x=\ngithub.com/spoolq/spool/shared v0.1.0 h1:y=\n"))
	b := withoutSpoolSums([]byte("github.com/nats-io/nats.go v1 h1:x=\n"))
	if a != b || !strings.Contains(a, "nats.go") {
		t.Errorf("%q vs %q", a, b)
	}
}
