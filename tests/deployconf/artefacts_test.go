package deployconf_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository root, seen from this package.
var root = filepath.Join("..", "..")

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pendingVars are SPOOL_ variables the deployment files set for settings
// announced but not yet read by any binary. Setting an unknown variable is
// harmless; remove an entry once its binary declares it.
var pendingVars = map[string]string{}

// declaredVars collects every SPOOL_ variable declared by an envconfig tag
// in the Go modules.
func declaredVars(t *testing.T) map[string]bool {
	t.Helper()
	tag := regexp.MustCompile(`envconfig:"([A-Z0-9_]+)"`)
	vars := map[string]bool{}
	for _, mod := range []string{"shared", "streams", "producer", "consumer"} {
		err := filepath.WalkDir(filepath.Join(root, mod), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range tag.FindAllStringSubmatch(string(b), -1) {
				vars["SPOOL_"+m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !vars["SPOOL_NATS_URL"] || !vars["SPOOL_REPLICAS"] {
		t.Fatalf("found %d envconfig variables, not SPOOL_NATS_URL and SPOOL_REPLICAS: the scan is broken", len(vars))
	}
	return vars
}

// TestDeployVariablesExist: every SPOOL_ variable a deployment file sets is
// one a binary reads, so a typo cannot silently fall back to a default.
func TestDeployVariablesExist(t *testing.T) {
	t.Parallel()
	declared := declaredVars(t)
	setVar := regexp.MustCompile(`\b(SPOOL_[A-Z0-9_]+)\s*[:=]|name:\s*(SPOOL_[A-Z0-9_]+)\b`)
	var checked int
	err := filepath.WalkDir(filepath.Join(root, "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if filepath.Ext(path) == ".conf" || filepath.Ext(path) == ".md" {
			return nil // nats-server variables and prose
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range setVar.FindAllStringSubmatch(string(b), -1) {
			v := m[1] + m[2]
			checked++
			if !declared[v] && pendingVars[v] == "" {
				t.Errorf("%s sets %s, which no binary reads", path, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d variable settings found in deploy/: the scan is broken", checked)
	}
	for v, what := range pendingVars {
		if declared[v] {
			t.Logf("%s (%s) is declared now: it can leave pendingVars", v, what)
		}
	}
}

// dockerfileBinaries returns binary -> package from the Dockerfile's case.
func dockerfileBinaries(t *testing.T) map[string]string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s+(spool-[a-z]+)\)\s+pkg=(\S+)\s+;;`)
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(read(t, "deploy/docker/Dockerfile"), -1) {
		out[m[1]] = m[2]
	}
	return out
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	df := read(t, "deploy/docker/Dockerfile")
	bins := dockerfileBinaries(t)
	want := []string{"spool-admin", "spool-consumer", "spool-producer"}
	var got []string
	for b := range bins {
		got = append(got, b)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("Dockerfile builds %v, want %v", got, want)
	}
	for bin, pkg := range bins {
		main := filepath.Join(root, filepath.FromSlash(pkg), "main.go")
		b, err := os.ReadFile(main)
		if err != nil {
			t.Errorf("%s: package %s: %v", bin, pkg, err)
			continue
		}
		if !strings.Contains(string(b), "\npackage main\n") {
			t.Errorf("%s: %s is not package main", bin, main)
		}
		if filepath.Base(pkg) != bin {
			t.Errorf("%s is built from %s: names differ", bin, pkg)
		}
	}
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if len(froms) < 2 {
		t.Fatalf("%d FROM lines, want a multi-stage build", len(froms))
	}
	final := froms[len(froms)-1][1]
	if !strings.HasPrefix(final, "gcr.io/distroless/static") || !strings.HasSuffix(final, ":nonroot") {
		t.Errorf("final stage %s, want distroless static nonroot", final)
	}
	if !regexp.MustCompile(`(?m)^USER nonroot`).MatchString(df) {
		t.Error("final stage does not switch to USER nonroot")
	}
	if !strings.Contains(df, "CGO_ENABLED=0") {
		t.Error("binary is not static (CGO_ENABLED=0 missing)")
	}
}

func TestCompose(t *testing.T) {
	t.Parallel()
	c := read(t, "deploy/compose.yaml")
	if strings.Contains(c, "\t") {
		t.Error("compose.yaml contains a tab: YAML forbids tabs for indentation")
	}
	// Mounted files exist, relative to deploy/.
	for _, m := range regexp.MustCompile(`- (\./[^:\s]+):`).FindAllStringSubmatch(c, -1) {
		if _, err := os.Stat(filepath.Join(root, "deploy", filepath.FromSlash(m[1]))); err != nil {
			t.Errorf("compose.yaml mounts %s: %v", m[1], err)
		}
	}
	for _, n := range []string{"1", "2", "3"} {
		if !strings.Contains(c, "./nats/cluster-n"+n+".conf:") {
			t.Errorf("compose.yaml does not mount cluster-n%s.conf", n)
		}
		// The cluster configs route to spool-n1..3: the services must
		// carry those names.
		if !regexp.MustCompile(`(?m)^  spool-n` + n + `:$`).MatchString(c) {
			t.Errorf("compose.yaml has no service spool-n%s, the host name the cluster routes dial", n)
		}
	}
	bins := dockerfileBinaries(t)
	for _, m := range regexp.MustCompile(`BINARY: (\S+)`).FindAllStringSubmatch(c, -1) {
		if bins[m[1]] == "" {
			t.Errorf("compose.yaml builds BINARY %s, which the Dockerfile does not know", m[1])
		}
	}
	for _, want := range []string{`SPOOL_REPLICAS: "3"`, `command: ["provision"`, "service_completed_successfully", "replicas: 2", `"127.0.0.1:8080:8080"`, `command: ["serve"]`} {
		if !strings.Contains(c, want) {
			t.Errorf("compose.yaml lacks %s", want)
		}
	}
}

// unit parses a systemd unit into section -> key -> values.
func unit(t *testing.T, rel string) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	var section string
	sc := bufio.NewScanner(strings.NewReader(read(t, rel)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is not key=value in a section", rel, n, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file, exec string
	}{
		{"deploy/systemd/spool-consumer.service", "/usr/local/bin/spool-consumer"},
		{"deploy/systemd/spool-broker.service", "/usr/local/bin/spool-producer serve"},
	} {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			t.Parallel()
			u := unit(t, tt.file)
			svc := u["Service"]
			want := map[string]string{
				"ExecStart":               tt.exec,
				"Restart":                 "on-failure",
				"NoNewPrivileges":         "yes",
				"DynamicUser":             "yes",
				"ProtectSystem":           "strict",
				"ProtectHome":             "yes",
				"PrivateTmp":              "yes",
				"CapabilityBoundingSet":   "",
				"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
			}
			for k, v := range want {
				if !slices.Contains(svc[k], v) {
					t.Errorf("[Service] %s = %q, want %q", k, svc[k], v)
				}
			}
			if !slices.Contains(svc["EnvironmentFile"], "/etc/spool/spool.env") {
				t.Errorf("EnvironmentFile %q lacks /etc/spool/spool.env", svc["EnvironmentFile"])
			}
			if !slices.Contains(u["Install"]["WantedBy"], "multi-user.target") {
				t.Error("not WantedBy multi-user.target")
			}
			// The binary behind ExecStart is one the Dockerfile knows how
			// to build, i.e. one the repository has.
			bin := filepath.Base(strings.Fields(tt.exec)[0])
			if dockerfileBinaries(t)[bin] == "" {
				t.Errorf("ExecStart runs %s, not a Spool binary", bin)
			}
		})
	}
}
