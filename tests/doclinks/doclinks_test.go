package doclinks_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/spoolq/spool/tests/doclinks"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRepositoryLinks checks every Markdown file of the repository: a
// renamed file or heading fails make test until its links follow.
func TestRepositoryLinks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("the repository root %s has no go.work: %v", root, err)
	}
	files, err := doclinks.Files(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", "docs/contract.md", "docs/architecture.md", "deploy/README.md", "BENCHMARKS.md"} {
		if !slices.Contains(files, want) {
			t.Fatalf("the Markdown files %v lack %s", files, want)
		}
	}
	problems, err := doclinks.Check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("broken link %s", p)
	}
	t.Logf("checked the links of %d Markdown files", len(files))
}

// TestBrokenLinks runs the checker on a fixture whose good links must
// pass and whose broken ones must each be reported.
func TestBrokenLinks(t *testing.T) {
	t.Parallel()
	root := filepath.Join("testdata", "site")
	files, err := doclinks.Files(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README.md", "docs/guide.md"}; !slices.Equal(files, want) {
		t.Fatalf("files %v, want %v", files, want)
	}
	problems, err := doclinks.Check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:23: docs/missing.md: docs/missing.md does not exist",
		"README.md:23: docs/guide.md#no-such-heading: no heading of docs/guide.md has the anchor #no-such-heading",
		"README.md:24: docs/guide.md#Usage: no heading of docs/guide.md has the anchor #Usage",
		"README.md:24: docs/guide.md#usage-3: no heading of docs/guide.md has the anchor #usage-3",
		"README.md:25: docs/guide.md#L3: no heading of docs/guide.md has the anchor #L3",
		"README.md:25: #links-that-do: no heading of README.md has the anchor #links-that-do",
		"README.md:26: ../../outside.md: the path leaves the repository",
		"README.md:26: sub#x: sub is a directory: it has no anchor \"x\"",
		"README.md:29: docs/nope.md: docs/nope.md does not exist",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
