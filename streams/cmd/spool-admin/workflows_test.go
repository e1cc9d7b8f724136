package main

import (
	"strings"
	"testing"

	"github.com/spoolq/spool/shared/workflow"

	spool "github.com/spoolq/spool/shared"
)

func TestWorkflowCommands(t *testing.T) {
	t.Parallel()
	url, admin := startAdmin(t)
	if out, err := admin("provision"); err != nil || !strings.Contains(out, "spool_workflows") {
		t.Fatalf("provision: %v %s", err, out)
	}
	nc, js := connect(t, url)
	defer nc.Close()
	store, err := workflow.Open(t.Context(), js, spool.DefaultNames(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var d workflow.Doc
	d.ID = "nightly"
	d.Chain(workflow.Task("extract", "etl.extract", nil), workflow.Task("load", "etl.load", nil))
	if _, err := store.Submit(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	out, err := admin("workflows", "list")
	if err != nil || !strings.Contains(out, "nightly") || !strings.Contains(out, "running") || !strings.Contains(out, "0/2") {
		t.Errorf("list: %v\n%s", err, out)
	}
	out, err = admin("workflows", "show", "nightly")
	if err != nil || !strings.Contains(out, "extract") || !strings.Contains(out, "queued") || !strings.Contains(out, "pending") {
		t.Errorf("show: %v\n%s", err, out)
	}
	out, err = admin("workflows", "cancel", "nightly", "--json")
	if err != nil || !strings.Contains(out, `"cancelled": true`) {
		t.Errorf("cancel: %v\n%s", err, out)
	}
	if _, err := admin("workflows", "show"); err == nil || !strings.Contains(err.Error(), "takes 1 argument") {
		t.Errorf("show without id: %v", err)
	}
	if _, err := admin("workflows", "show", "nope"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("show unknown: %v", err)
	}
}
