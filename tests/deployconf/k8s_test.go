package deployconf_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	spool "github.com/spoolq/spool/shared"
)

// manifests returns the YAML documents of every deploy/k8s file.
func manifests(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "deploy", "k8s", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no manifests in deploy/k8s")
	}
	out := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "\t") {
			t.Errorf("%s contains a tab: YAML forbids tabs for indentation", f)
		}
		for _, doc := range regexp.MustCompile(`(?m)^---$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) != "" {
				out[filepath.Base(f)] = append(out[filepath.Base(f)], doc)
			}
		}
	}
	return out
}

func stripComments(doc string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")
}

func kind(doc string) string {
	m := regexp.MustCompile(`(?m)^kind: (\S+)$`).FindStringSubmatch(doc)
	if m == nil {
		return ""
	}
	return m[1]
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	docs := manifests(t)
	kinds := map[string]string{}
	for file, ds := range docs {
		if file == "nats-values.yaml" {
			continue // Helm values, not a manifest
		}
		for _, d := range ds {
			k := kind(d)
			if k == "" || !regexp.MustCompile(`(?m)^apiVersion: \S+$`).MatchString(d) {
				t.Errorf("%s: a document without top-level apiVersion and kind", file)
				continue
			}
			name := regexp.MustCompile(`(?m)^  name: (\S+)$`).FindStringSubmatch(d)
			if name != nil {
				kinds[k+"/"+name[1]] = file
			}
		}
	}
	for _, want := range []string{
		"Deployment/spool-consumer", "Deployment/spool-broker", "Job/spool-provision",
		"ScaledObject/spool-consumer", "Service/spool-broker", "ConfigMap/spool-config",
		"Namespace/spool",
	} {
		if _, ok := kinds[want]; !ok {
			t.Errorf("no %s in deploy/k8s (have %v)", want, kinds)
		}
	}

	kust := strings.Join(docs["kustomization.yaml"], "")
	for _, m := range regexp.MustCompile(`(?m)^  - (\S+\.yaml)$`).FindAllStringSubmatch(kust, -1) {
		if _, ok := docs[m[1]]; !ok {
			t.Errorf("kustomization.yaml lists %s, which does not exist", m[1])
		}
	}
	// Every image a manifest names is mapped to a registry by the
	// kustomization and built by the Dockerfile.
	bins := dockerfileBinaries(t)
	for file, ds := range docs {
		for _, d := range ds {
			for _, m := range regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindAllStringSubmatch(d, -1) {
				if !strings.Contains(kust, "- name: "+m[1]+"\n") {
					t.Errorf("%s: image %s has no entry in kustomization.yaml images", file, m[1])
				}
				if bins[m[1]] == "" {
					t.Errorf("%s: image %s is not a binary the Dockerfile builds", file, m[1])
				}
			}
		}
	}

	consumer := strings.Join(docs["consumer.yaml"], "")
	broker := strings.Join(docs["broker.yaml"], "")
	job := strings.Join(docs["provision-job.yaml"], "")
	for _, c := range []struct {
		file, text string
		want       []string
	}{
		{"consumer.yaml", consumer, []string{"path: /healthz", "path: /readyz", "containerPort: 9090", "name: SPOOL_METRICS_ADDR", `value: ":9090"`, "name: spool-consumer-nats", "readOnlyRootFilesystem: true", "runAsNonRoot: true"}},
		{"broker.yaml", broker, []string{"path: /healthz", "path: /readyz", "containerPort: 8080", `args: ["serve"]`, "name: spool-broker-nats", "readOnlyRootFilesystem: true", "runAsNonRoot: true"}},
		{"provision-job.yaml", job, []string{`args: ["provision"`, "name: SPOOL_REPLICAS", `value: "3"`, "name: spool-admin-nats"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.text, w) {
				t.Errorf("%s lacks %s", c.file, w)
			}
		}
	}
	// Secrets referenced by the workloads are the ones the example defines.
	secrets := strings.Join(docs["secrets.example.yaml"], "")
	for _, m := range regexp.MustCompile(`secretRef:\s+name: (\S+)`).FindAllStringSubmatch(consumer+broker+job, -1) {
		if !strings.Contains(secrets, "name: "+m[1]+"\n") {
			t.Errorf("secret %s is used but not in secrets.example.yaml", m[1])
		}
	}
}

// TestKEDATriggers: one nats-jetstream trigger per priority consumer, on the
// task stream, each with a lag threshold.
func TestKEDATriggers(t *testing.T) {
	t.Parallel()
	names := spool.DefaultNames()
	so := strings.Join(manifests(t)["keda-scaledobject.yaml"], "")
	triggers := strings.Split(so, "- type: nats-jetstream")[1:]
	if len(triggers) != len(spool.Priorities) {
		t.Fatalf("%d nats-jetstream triggers, want one per priority (%d)", len(triggers), len(spool.Priorities))
	}
	seen := map[string]bool{}
	for i, tr := range triggers {
		c := regexp.MustCompile(`consumer: (\S+)`).FindStringSubmatch(tr)
		if c == nil {
			t.Errorf("trigger %d names no consumer", i)
			continue
		}
		seen[c[1]] = true
		for _, w := range []string{"stream: " + names.TaskStream(), "account: SPOOL", "natsServerMonitoringEndpoint: ", `lagThreshold: "`} {
			if !strings.Contains(tr, w) {
				t.Errorf("trigger for %s lacks %s", c[1], w)
			}
		}
	}
	for _, p := range spool.Priorities {
		if !seen[names.Consumer(p)] {
			t.Errorf("no trigger for consumer %s", names.Consumer(p))
		}
	}
	if !strings.Contains(so, "name: spool-consumer") {
		t.Error("ScaledObject does not target the spool-consumer Deployment")
	}
}

func TestNATSHelmValues(t *testing.T) {
	t.Parallel()
	v := strings.Join(manifests(t)["nats-values.yaml"], "")
	for _, w := range []string{
		"sync_interval: always", "replicas: 3", "fileStore:\n      enabled: true",
		"spool$include: ./spool/auth.conf", "mountPath: /etc/nats-config/spool",
		"secretName: spool-nats-auth", "--from-file=auth.conf=deploy/nats/auth.conf",
		"--from-file=spool-secrets.conf=",
	} {
		if !strings.Contains(v, w) {
			t.Errorf("nats-values.yaml lacks %q", w)
		}
	}
	// Compose and Kubernetes run the same nats-server.
	tag := regexp.MustCompile(`(?m)^    tag: (\S+)$`).FindStringSubmatch(v)
	if tag == nil {
		t.Fatal("nats-values.yaml pins no container.image.tag")
	}
	if !strings.Contains(read(t, "deploy/compose.yaml"), "image: nats:"+tag[1]+"\n") {
		t.Errorf("compose.yaml does not run nats:%s like nats-values.yaml", tag[1])
	}
}
