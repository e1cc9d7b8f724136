package workflow_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spoolq/spool/shared/workflow"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	step := func(name string, after ...string) string {
		a := ""
		if len(after) > 0 {
			a = `,"after":["` + strings.Join(after, `","`) + `"]`
		}
		return `{"name":"` + name + `","type":"t"` + a + `}`
	}
	many := make([]string, workflow.MaxSteps+1)
	for i := range many {
		many[i] = step(fmt.Sprintf("s%d", i))
	}
	tests := []struct {
		name, doc, wantErr string
	}{
		{"chain", `{"steps":[` + step("a") + `,` + step("b", "a") + `]}`, ""},
		{"cycle", `{"steps":[` + step("a", "c") + `,` + step("b", "a") + `,` + step("c", "b") + `]}`, "cycle"},
		{"self", `{"steps":[` + step("a", "a") + `]}`, "the step itself"},
		{"unknown dependency", `{"steps":[` + step("a", "zz") + `]}`, `after names "zz", which is not a step`},
		{"duplicate name", `{"steps":[` + step("a") + `,` + step("a") + `]}`, `step "a": the name is used twice`},
		{"no steps", `{"steps":[]}`, "at least one step"},
		{"too many steps", `{"steps":[` + strings.Join(many, ",") + `]}`, "at most 20000"},
		{"bad name", `{"steps":[` + step("a.b") + `]}`, `step name: "a.b" has '.'`},
		{"bad type", `{"steps":[{"name":"a","type":"no spaces"}]}`, "invalid task type"},
		{"bad policy", `{"on_error":"retry","steps":[` + step("a") + `]}`, `on_error "retry"`},
		{"bad version", `{"version":2,"steps":[` + step("a") + `]}`, "version 2"},
		{"unknown field", `{"steps":[{"name":"a","type":"t","colour":1}]}`, `unknown field "colour"`},
		{"on_failure with after", `{"on_failure":` + step("n", "a") + `,"steps":[` + step("a") + `]}`, "after must be empty"},
		{"after the on_failure step", `{"on_failure":` + step("n") + `,"steps":[` + step("a", "n") + `]}`, "not a step"},
		{"reserved type", `{"steps":[{"name":"a","type":"` + workflow.SubmitType + `"}]}`, "reserved"},
		{"bad timeout", `{"steps":[{"name":"a","type":"t","timeout":"soon"}]}`, "not a Go duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := workflow.Decode([]byte(tt.doc))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !errors.Is(err, workflow.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want ErrInvalid with %q", err, tt.wantErr)
			}
		})
	}
}

// A step's payload survives the JSON round trip: JSON as payload, other
// bytes as payload_base64.
func TestStepJSONRoundTrip(t *testing.T) {
	t.Parallel()
	for _, p := range [][]byte{[]byte(`{"a":1}`), {0xff, 0x00}, nil} {
		var d workflow.Doc
		d.Chain(workflow.Task("a", "t", p), workflow.Task("b", "t", nil))
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := workflow.Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if string(got.Steps[0].Payload) != string(p) || !got.Steps[1].Inputs || got.Steps[1].After[0] != "a" {
			t.Errorf("round trip of %s: %+v", b, got)
		}
	}
}
