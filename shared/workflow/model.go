package workflow

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// Version is the version of the workflow document this package writes and
// accepts.
const Version = 1

// Limits of a workflow document.
const (
	// MaxSteps is the most steps a workflow may have (a group of 10,000
	// members and its callback fit).
	MaxSteps = 20000
	// MaxIDLen is the longest workflow id; ids are [A-Za-z0-9_-].
	MaxIDLen = 64
	// MaxNameLen is the longest step name; names are [A-Za-z0-9_-].
	MaxNameLen = 56
	// MaxDocBytes is the largest encoded document accepted (8 MiB).
	MaxDocBytes = 8 << 20
	// MaxStepBytes is the largest encoded step (its payload included):
	// each step is stored as one value of the workflows bucket (512 KiB).
	MaxStepBytes = 512 << 10
)

// Policy says what a failed step does to the rest of the workflow.
type Policy string

// Failure policies.
const (
	// Stop (the default) cancels every step that has not started: they
	// end cancelled, and the workflow failed.
	Stop Policy = "stop"
	// Continue runs on every branch that does not depend on the failed
	// step; the steps that do are cancelled, and the workflow ends failed.
	Continue Policy = "continue"
)

// Doc is a workflow document: the JSON that every submitter sends.
type Doc struct {
	// Version is the document version; 0 means Version.
	Version int `json:"version,omitempty"`
	// ID names the workflow ([A-Za-z0-9_-], at most MaxIDLen); empty
	// means a new time-ordered id. Submitting an id twice is refused.
	ID string `json:"id,omitempty"`
	// OnError is the failure policy; empty means Stop.
	OnError Policy `json:"on_error,omitempty"`
	// OnFailure, if set, is a step enqueued once per round, when the first
	// step fails; its payload carries the failure (see StepInput). A retry
	// starts a new round, so a retry that fails again runs it again with the
	// new failure. Its After must be empty.
	OnFailure *Step `json:"on_failure,omitempty"`
	// Steps in any order; names are unique.
	Steps []Step `json:"steps"`
}

// Step is one task of a workflow.
type Step struct {
	// Name identifies the step in its workflow ([A-Za-z0-9_-], at most
	// MaxNameLen).
	Name string
	// Type is the task type.
	Type string
	// Priority of the step's task; the zero value is spool.Critical, so
	// build steps with Task, which sets spool.Normal (the JSON default).
	Priority spool.Priority
	// Payload is the task payload (any bytes).
	Payload []byte
	// MaxRetries after the first attempt; nil means the worker's default.
	MaxRetries *int
	// Timeout per attempt; 0 means the worker's default.
	Timeout time.Duration
	// After names the steps this one waits for: it runs once all of them
	// completed.
	After []string
	// Inputs makes the step receive the results of its After steps, in
	// order: its payload is then a StepInput document.
	Inputs bool
}

// Task returns a step of priority normal.
func Task(name, typ string, payload []byte) Step {
	return Step{Name: name, Type: typ, Priority: spool.Normal, Payload: payload}
}

// stepJSON is Step on the wire.
type stepJSON struct {
	Name          string          `json:"name"`
	Type          string          `json:"type"`
	Priority      *spool.Priority `json:"priority,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 *string         `json:"payload_base64,omitempty"`
	MaxRetries    *int            `json:"max_retries,omitempty"`
	Timeout       string          `json:"timeout,omitempty"`
	After         []string        `json:"after,omitempty"`
	Inputs        bool            `json:"inputs,omitempty"`
}

// MarshalJSON writes a JSON payload as payload and any other as
// payload_base64.
func (s Step) MarshalJSON() ([]byte, error) {
	p := s.Priority
	j := stepJSON{Name: s.Name, Type: s.Type, Priority: &p, MaxRetries: s.MaxRetries, After: s.After, Inputs: s.Inputs}
	if s.Timeout > 0 {
		j.Timeout = s.Timeout.String()
	}
	switch {
	case len(s.Payload) == 0:
	case json.Valid(s.Payload):
		j.Payload = s.Payload
	default:
		b := base64.StdEncoding.EncodeToString(s.Payload)
		j.PayloadBase64 = &b
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a step; priority defaults to normal.
func (s *Step) UnmarshalJSON(b []byte) error {
	var j stepJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	*s = Step{Name: j.Name, Type: j.Type, Priority: spool.Normal, MaxRetries: j.MaxRetries, After: j.After, Inputs: j.Inputs}
	if j.Priority != nil {
		s.Priority = *j.Priority
	}
	if len(j.Payload) > 0 && j.PayloadBase64 != nil {
		return fmt.Errorf("step %q: set payload or payload_base64, not both", j.Name)
	}
	if j.PayloadBase64 != nil {
		p, err := base64.StdEncoding.DecodeString(*j.PayloadBase64)
		if err != nil {
			return fmt.Errorf("step %q: payload_base64 is not standard base64: %w", j.Name, err)
		}
		s.Payload = p
	} else if len(j.Payload) > 0 && !bytes.Equal(j.Payload, []byte("null")) {
		s.Payload = []byte(j.Payload)
	}
	if j.Timeout != "" {
		d, err := time.ParseDuration(j.Timeout)
		if err != nil {
			return fmt.Errorf("step %q: timeout %q is not a Go duration (like 30s)", j.Name, j.Timeout)
		}
		s.Timeout = d
	}
	return nil
}

// Decode reads a JSON workflow document, rejecting unknown fields, and
// validates it.
func Decode(b []byte) (Doc, error) {
	var d Doc
	if len(b) > MaxDocBytes {
		return d, fmt.Errorf("%w: the document is %d bytes, at most %d", ErrInvalid, len(b), MaxDocBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return d, d.Validate()
}

// ErrInvalid is wrapped by every validation error of a document.
var ErrInvalid = errors.New("invalid workflow")

// Validate checks the document: version, id, policy, every step's fields
// (with the task rules of spool.TaskFields), unique names, known
// dependencies, no cycle, and the size limits. The error wraps ErrInvalid
// and names the step and field at fault.
func (d *Doc) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if d.Version != 0 && d.Version != Version {
		return bad("version %d is not supported (want %d)", d.Version, Version)
	}
	if d.ID != "" {
		if err := checkName(d.ID, MaxIDLen); err != nil {
			return bad("id: %v", err)
		}
	}
	switch d.OnError {
	case "", Stop, Continue:
	default:
		return bad("on_error %q: want %q or %q", d.OnError, Stop, Continue)
	}
	if len(d.Steps) == 0 {
		return bad("steps: at least one step is needed")
	}
	if len(d.Steps) > MaxSteps {
		return bad("steps: %d steps, at most %d", len(d.Steps), MaxSteps)
	}
	index := make(map[string]int, len(d.Steps))
	all := d.Steps
	if d.OnFailure != nil {
		all = append(all[:len(all):len(all)], *d.OnFailure)
	}
	size := 0
	for i, s := range all {
		if err := s.validate(); err != nil {
			return bad("%w", err)
		}
		if _, dup := index[s.Name]; dup {
			return bad("step %q: the name is used twice", s.Name)
		}
		index[s.Name] = i
		size += len(s.Payload) + 64*len(s.After) + 256
	}
	if size > MaxDocBytes {
		return bad("the document is about %d bytes, at most %d", size, MaxDocBytes)
	}
	if d.OnFailure != nil && len(d.OnFailure.After) > 0 {
		return bad("on_failure step %q: after must be empty (it runs when a step fails)", d.OnFailure.Name)
	}
	for _, s := range d.Steps {
		seen := make(map[string]bool, len(s.After))
		for _, dep := range s.After {
			j, ok := index[dep]
			if !ok || j == len(d.Steps) {
				return bad("step %q: after names %q, which is not a step of the workflow", s.Name, dep)
			}
			if dep == s.Name {
				return bad("step %q: after names the step itself", s.Name)
			}
			if seen[dep] {
				return bad("step %q: after names %q twice", s.Name, dep)
			}
			seen[dep] = true
		}
	}
	if cycle := findCycle(d.Steps, index); cycle != nil {
		return bad("the steps form a cycle: %v", cycle)
	}
	return nil
}

func (s Step) validate() error {
	if err := checkName(s.Name, MaxNameLen); err != nil {
		return fmt.Errorf("step name: %w", err)
	}
	f := spool.TaskFields{Type: s.Type, Priority: s.Priority, Meta: spool.Meta{MaxRetries: s.MaxRetries, Timeout: s.Timeout}}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("step %q: %w", s.Name, err)
	}
	if s.Type == SubmitType {
		return fmt.Errorf("step %q: type %q is reserved", s.Name, SubmitType)
	}
	if len(s.Payload) > MaxStepBytes-4096 {
		return fmt.Errorf("step %q: payload is %d bytes, at most %d", s.Name, len(s.Payload), MaxStepBytes-4096)
	}
	return nil
}

// checkName checks a workflow id or step name: 1 to max characters of
// [A-Za-z0-9_-].
func checkName(s string, max int) error {
	if s == "" {
		return errors.New("empty")
	}
	if len(s) > max {
		return fmt.Errorf("%q is %d characters, at most %d", s, len(s), max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%q has %q at %d (allowed: A-Z a-z 0-9 _ -)", s, c, i)
		}
	}
	return nil
}

// findCycle returns the names along a cycle of the After edges, or nil.
func findCycle(steps []Step, index map[string]int) []string {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(steps))
	type frame struct{ i, next int }
	for start := range steps {
		if color[start] != white {
			continue
		}
		stack := []frame{{start, 0}}
		color[start] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			after := steps[top.i].After
			if top.next == len(after) {
				color[top.i] = black
				stack = stack[:len(stack)-1]
				continue
			}
			j := index[after[top.next]]
			top.next++
			switch color[j] {
			case grey:
				var cycle []string
				for k := len(stack) - 1; k >= 0; k-- {
					cycle = append(cycle, steps[stack[k].i].Name)
					if stack[k].i == j {
						break
					}
				}
				return cycle
			case white:
				color[j] = grey
				stack = append(stack, frame{j, 0})
			}
		}
	}
	return nil
}

// Chain appends steps that run one after the other, the first after the
// last step already in d (if any), each receiving the previous step's
// result unless the step sets its own After. It returns d.
func (d *Doc) Chain(steps ...Step) *Doc {
	for _, s := range steps {
		if len(s.After) == 0 && len(d.Steps) > 0 {
			s.After = []string{d.Steps[len(d.Steps)-1].Name}
			s.Inputs = true
		}
		d.Steps = append(d.Steps, s)
	}
	return d
}

// Group appends members that run in parallel and a callback that runs once
// all of them completed, receiving their results in order (a chord). It
// returns d.
func (d *Doc) Group(members []Step, callback Step) *Doc {
	callback.After = make([]string, 0, len(members))
	for _, m := range members {
		callback.After = append(callback.After, m.Name)
	}
	callback.Inputs = true
	d.Steps = append(d.Steps, members...)
	d.Steps = append(d.Steps, callback)
	return d
}

// Add appends steps as given (a DAG: set each step's After). It returns d.
func (d *Doc) Add(steps ...Step) *Doc {
	d.Steps = append(d.Steps, steps...)
	return d
}

// StepInput is the payload of a step with Inputs set, and of the
// on-failure step.
type StepInput struct {
	// Payload is the step's own payload, encoded as a result document
	// encodes output: JSON as is, other UTF-8 as a JSON string
	// (PayloadEncoding "text"), other bytes as a base64 string
	// (PayloadEncoding "base64").
	Payload         json.RawMessage `json:"payload,omitempty"`
	PayloadEncoding string          `json:"payload_encoding,omitempty"`
	// Inputs are the results of the After steps, in order: each one the
	// result field of the step task's result document as stored (see its
	// result_encoding there), JSON null for a step without output.
	Inputs []json.RawMessage `json:"inputs,omitempty"`
	// Failed is, for the on-failure step, the step that failed.
	Failed *Failure `json:"failed,omitempty"`
}

// Failure describes the failed step given to the on-failure step.
type Failure struct {
	Step   string `json:"step"`
	TaskID string `json:"task_id"`
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// DecodeInput reads the payload of a step that receives inputs.
func DecodeInput(payload []byte) (StepInput, error) {
	var in StepInput
	if err := json.Unmarshal(payload, &in); err != nil {
		return in, fmt.Errorf("decoding workflow step input: %w", err)
	}
	return in, nil
}
