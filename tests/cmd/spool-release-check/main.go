// Command spool-release-check proves that Spool's modules resolve as a user
// outside this repository gets them (make release-check): it builds a
// local file module proxy holding shared, streams, producer and consumer at
// the release version, from the files git tracks, then builds a new module
// outside the workspace that imports producer and consumer through that
// proxy alone (GOWORK=off, a fresh module cache, third-party modules from
// the local module cache or the usual proxy), and checks every module's
// go.mod is tidy against it.
//
// It fails when a module requires a sibling at another version, at v0.0.0
// or a pseudo-version, or with a replace directive: what `go get
// github.com/spoolq/spool/producer@<version>` could never resolve.
package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// modulePrefix is the path every Spool module shares.
const modulePrefix = "github.com/spoolq/spool/"

// libraries are the published modules, dependencies first.
var libraries = []string{"shared", "streams", "producer", "consumer"}

func main() {
	version := flag.String("version", "v0.1.0", "the release version the modules require each other at")
	keep := flag.Bool("keep", false, "keep the proxy and the outside module (their directory is printed)")
	flag.Parse()
	if err := run(*version, *keep, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release-check:", err)
		os.Exit(1)
	}
}

func run(version string, keep bool, out io.Writer) error {
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(version) {
		return fmt.Errorf("-version %q is not a release version vMAJOR.MINOR.PATCH", version)
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	for _, m := range append(slices.Clone(libraries), "tests") {
		if err := checkRequires(root, m, version); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "spool-release-check-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintln(out, "release-check: working in", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	proxy := filepath.Join(tmp, "proxy")
	for _, m := range libraries {
		n, err := publish(root, proxy, m, version)
		if err != nil {
			return fmt.Errorf("publishing %s: %w", m, err)
		}
		fmt.Fprintf(out, "release-check: %s%s@%s: %d files\n", modulePrefix, m, version, n)
	}
	env, err := goEnv(tmp, proxy)
	if err != nil {
		return err
	}
	for _, m := range append(slices.Clone(libraries), "tests") {
		if err := checkTidy(root, filepath.Join(tmp, "tidy", m), m, env); err != nil {
			return err
		}
	}
	outside := filepath.Join(tmp, "outside")
	if err := writeOutside(root, outside); err != nil {
		return err
	}
	steps := [][]string{
		{"get", modulePrefix + "producer@" + version, modulePrefix + "consumer@" + version},
		{"mod", "tidy"},
		{"vet", "./..."},
		{"run", "."},
	}
	for _, args := range steps {
		if err := goCmd(outside, env, args...); err != nil {
			return fmt.Errorf("outside module: %w", err)
		}
	}
	fmt.Fprintf(out, "release-check: an outside module builds and runs with producer and consumer %s from the proxy alone\n", version)
	return nil
}

// repoRoot is the directory holding go.work, from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory: run from the repository")
		}
		dir = parent
	}
}

var requireLine = regexp.MustCompile(`^\s*(?:require\s+)?(github\.com/spoolq/spool/\S+)\s+(\S+)`)

// checkRequires refuses a go.mod that requires a sibling at anything but
// version, or that has a replace directive.
func checkRequires(root, m, version string) error {
	b, err := os.ReadFile(filepath.Join(root, m, "go.mod"))
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "replace") {
			return fmt.Errorf("%s/go.mod:%d: a replace directive (%s); development replaces belong in go.work", m, n, strings.TrimSpace(line))
		}
		if mm := requireLine.FindStringSubmatch(line); mm != nil && !strings.HasPrefix(strings.TrimSpace(line), "module") && mm[2] != version {
			return fmt.Errorf("%s/go.mod:%d: requires %s at %s, want the release version %s", m, n, mm[1], mm[2], version)
		}
	}
	return sc.Err()
}

// publish writes module m at version into a file proxy (GOPROXY=file://)
// and returns how many files its zip holds: the files git tracks under m.
func publish(root, proxy, m, version string) (int, error) {
	path := modulePrefix + m
	dir := filepath.Join(proxy, filepath.FromSlash(path), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	files, err := trackedFiles(root, m)
	if err != nil {
		return 0, err
	}
	mod, err := os.ReadFile(filepath.Join(root, m, "go.mod"))
	if err != nil {
		return 0, err
	}
	info, err := json.Marshal(map[string]string{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return 0, err
	}
	zf, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		return 0, err
	}
	zw := zip.NewWriter(zf)
	for _, f := range files {
		w, err := zw.Create(path + "@" + version + "/" + f)
		if err != nil {
			return 0, err
		}
		b, err := os.ReadFile(filepath.Join(root, m, filepath.FromSlash(f)))
		if err != nil {
			return 0, err
		}
		if _, err := w.Write(b); err != nil {
			return 0, err
		}
	}
	if err := errors.Join(zw.Close(), zf.Close()); err != nil {
		return 0, err
	}
	for name, data := range map[string][]byte{version + ".mod": mod, version + ".info": info, "list": []byte(version + "\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return 0, err
		}
	}
	return len(files), nil
}

// trackedFiles lists the files git tracks under module m, relative to it,
// as a clean clone has them.
func trackedFiles(root, m string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--", m)
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the files of %s (git ls-files): %w", m, err)
	}
	var files []string
	for f := range strings.SplitSeq(strings.TrimRight(string(b), "\x00"), "\x00") {
		rel := strings.TrimPrefix(f, m+"/")
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			continue // deleted in the working tree and not yet committed
		}
		files = append(files, rel)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("git tracks no file under %s", m)
	}
	return files, nil
}

// goEnv is the environment of every go command: no workspace, modules from
// the proxy first, then the local module cache (itself a file proxy) and
// the usual proxy for third-party modules; a fresh module cache so nothing
// earlier stands in for the proxy; the checksum database is not asked
// about Spool's unpublished modules.
func goEnv(tmp, proxy string) ([]string, error) {
	b, err := exec.Command("go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("go env answered %q", b)
	}
	cache, upstream := lines[0], lines[1]
	proxies := []string{"file://" + filepath.ToSlash(proxy), "file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download"))}
	if upstream != "" && upstream != "off" {
		proxies = append(proxies, upstream)
	}
	return append(os.Environ(),
		"GOWORK=off",
		"GOFLAGS=-mod=mod",
		"GOPROXY="+strings.Join(proxies, ","),
		"GONOSUMDB="+strings.TrimSuffix(modulePrefix, "/"),
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
	), nil
}

// checkTidy runs go mod tidy on a copy of module m (its tracked files) and
// compares: go.mod must be unchanged, and go.sum too but for the checksums
// of Spool's own modules, which change with every commit until a version
// is tagged, so go.sum holds none of them.
func checkTidy(root, dir, m string, env []string) error {
	files, err := trackedFiles(root, m)
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, m, filepath.FromSlash(f)))
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
	}
	if err := goCmd(dir, env, "mod", "tidy"); err != nil {
		return fmt.Errorf("tidying %s: %w", m, err)
	}
	for _, name := range []string{"go.mod", "go.sum"} {
		want, err := os.ReadFile(filepath.Join(root, m, name))
		if err != nil && !(name == "go.sum" && errors.Is(err, os.ErrNotExist)) {
			return err
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !(name == "go.sum" && errors.Is(err, os.ErrNotExist)) {
			return err
		}
		if w, g := withoutSpoolSums(want), withoutSpoolSums(got); w != g {
			return fmt.Errorf("%s/%s is not tidy against the released modules; `go mod tidy` (GOWORK=off, with the released modules) changes it:\n%s", m, name, lineDiff(w, g))
		}
	}
	return nil
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "-"+l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+"+l)
		}
	}
	return strings.Join(out, "\n")
}

// withoutSpoolSums drops go.sum lines of Spool's own modules.
func withoutSpoolSums(b []byte) string {
	var keep []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, modulePrefix) {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

func goCmd(dir string, env []string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

// writeOutside writes a module outside the repository that uses producer
// and consumer as a user's program would, with the third-party checksums
// of producer's and consumer's go.sum (so none is looked up).
func writeOutside(root, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var sums []string
	for _, m := range []string{"producer", "consumer"} {
		b, err := os.ReadFile(filepath.Join(root, m, "go.sum"))
		if err != nil {
			return err
		}
		sums = append(sums, strings.Split(strings.TrimSpace(string(b)), "\n")...)
	}
	slices.Sort(sums)
	goVersion, err := goDirective(root)
	if err != nil {
		return err
	}
	files := map[string]string{
		"go.mod":  "module example.com/spool-outside\n\ngo " + goVersion + "\n",
		"go.sum":  strings.Join(slices.Compact(sums), "\n") + "\n",
		"main.go": outsideMain,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// goDirective is the go version the producer module declares.
func goDirective(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "producer", "go.mod"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(b)
	if m == nil {
		return "", errors.New("producer/go.mod has no go directive")
	}
	return string(m[1]), nil
}

// outsideMain is a user's program: a handler, a worker and a client built
// against the published API (nothing connects; it proves the packages
// resolve, compile together and link).
const outsideMain = `package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spoolq/spool/consumer"
	"github.com/spoolq/spool/consumer/remote"
	"github.com/spoolq/spool/producer"
	spool "github.com/spoolq/spool/shared"
)

func main() {
	mux := consumer.NewMux()
	mux.HandleFunc("email.send", func(ctx context.Context, t *consumer.Task) ([]byte, error) {
		return []byte(` + "`" + `{"sent":true}` + "`" + `), nil
	})
	if _, err := consumer.New(nil, mux); err == nil {
		panic("a worker without a connection")
	}
	if _, err := producer.New(nil); err == nil {
		panic("a client without a connection")
	}
	if err := (remote.Route{Pattern: "img.*", Subject: "spool.remote.{type}"}).Validate(); err != nil {
		panic(err)
	}
	t := producer.NewTask("email.send", nil)
	if t.PriorityOrDefault() != spool.Normal || !errors.Is(spool.ValidateType("a b"), spool.ErrInvalidType) {
		panic("unexpected defaults")
	}
	fmt.Println("spool modules resolve:", mux.Types())
}
`
