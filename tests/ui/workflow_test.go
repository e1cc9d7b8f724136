package ui_test

import (
	"context"
	"testing"
	"time"
)

// TestWorkflowGraph submits a DAG through the broker and finds it on the
// dashboard: listed with its state, drawn as a graph with each step's state
// and an edge per dependency, and a step's task looked up by a click.
func TestWorkflowGraph(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	st := startStack(t, ctx, 4)
	// fetch → (parse, thumbs) → publish; "broken" fails and, under
	// continue, only "after_broken" is cancelled.
	post(t, ctx, st.BrokerURL+"/v1/workflows", `{"version":1,"id":"ui-flow","on_error":"continue","steps":[
		{"name":"fetch","type":"demo.echo","payload":{"url":"x"}},
		{"name":"parse","type":"demo.echo","after":["fetch"],"inputs":true},
		{"name":"thumbs","type":"demo.echo","after":["fetch"]},
		{"name":"publish","type":"demo.echo","after":["parse","thumbs"],"inputs":true},
		{"name":"broken","type":"demo.fail","max_retries":0,"payload":{"fail_times":1}},
		{"name":"after_broken","type":"demo.echo","after":["broken"]}]}`)

	b := startBrowser(t)
	b.logIn(st.BrokerURL)
	row := `document.querySelector('#wf-list tbody tr[data-id="ui-flow"]')`
	b.waitJS("the finished workflow listed", row+` && `+row+`.textContent.includes("failed") && `+row+`.textContent.includes("6 / 6")`, 20*time.Second)
	b.do("opening the workflow", 10*time.Second, press(`#wf-list tbody tr[data-id="ui-flow"]`))
	node := func(name string) string {
		return `document.querySelector('#wf-graph g.node[data-step="` + name + `"]')`
	}
	b.waitJS("the graph", `document.querySelectorAll("#wf-graph g.node").length === 6`, 10*time.Second)
	for name, state := range map[string]string{"fetch": "completed", "parse": "completed", "thumbs": "completed",
		"publish": "completed", "broken": "failed", "after_broken": "cancelled"} {
		if got := eval[string](b, node(name)+`.dataset.state`); got != state {
			t.Errorf("node %s shows %q, want %q", name, got, state)
		}
	}
	if n := eval[int](b, `document.querySelectorAll("#wf-graph path.edge").length`); n != 5 {
		t.Errorf("%d edges, want 5", n)
	}
	if n := eval[int](b, `document.querySelectorAll('#wf-graph path.edge[data-to="publish"]').length`); n != 2 {
		t.Errorf("%d edges into the fan-in, want 2", n)
	}
	if x1, x2 := eval[float64](b, node("fetch")+`.querySelector("rect").x.baseVal.value`), eval[float64](b, node("publish")+`.querySelector("rect").x.baseVal.value`); x2 <= x1 {
		t.Errorf("publish (x %v) is not drawn right of fetch (x %v)", x2, x1)
	}
	b.screenshot("ui-workflow.png")
	b.do("clicking a step", 10*time.Second, press(`#wf-graph g.node[data-step="publish"] rect`))
	b.waitJS("the step's task looked up", `document.querySelector("#lookup-id").value === "ui-flow=publish" && document.querySelector("#lookup-state").textContent === "completed"`, 10*time.Second)
}
