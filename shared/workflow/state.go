package workflow

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

// SubmitType is the reserved task type of a workflow submitted over NATS:
// a task of this type whose payload is a Doc, published like any other
// task, is handled by every worker, which stores the workflow and enqueues
// its first steps.
const SubmitType = "_spool.workflow.submit"

// Headers a step's task carries, besides the task headers.
const (
	// HeaderWorkflow is the workflow id of a step's task.
	HeaderWorkflow = "Spool-Workflow"
	// HeaderStep is the step name of a step's task.
	HeaderStep = "Spool-Workflow-Step"
)

// State is the state of a workflow or of one of its steps.
type State string

// Step states. Completed, Failed and Cancelled are terminal.
const (
	// Pending: waiting for the steps it runs after.
	Pending State = "pending"
	// Queued: its task is enqueued (the task's own result document says
	// whether it is processing or retrying).
	Queued State = "queued"
	// Completed: its task completed.
	Completed State = "completed"
	// Failed: its task was dead-lettered (the error says why).
	Failed State = "failed"
	// Cancelled: it will not run (the workflow stopped or was cancelled,
	// or a step it runs after did not complete).
	Cancelled State = "cancelled"
)

// Workflow states: Running, then Completed (every step completed), Failed
// (a step failed) or Cancelled (Cancel was called).
const (
	// Running: submitted and not finished.
	Running State = "running"
)

// Terminal reports whether the state is final.
func (s State) Terminal() bool { return s == Completed || s == Failed || s == Cancelled }

// Key layout of the workflows bucket.
func recordKey(id string) string     { return id + ".wf" }
func stepKey(id, name string) string { return id + ".step." + name }
func stepsFilter(id string) string   { return id + ".step.*" }

// recordsFilter matches every workflow record key.
const recordsFilter = "*.wf"

// StepTaskID is the task id of a step's run: <workflow>=<step>, then
// <workflow>=<step>=<run> for the runs a retry starts. Workflow ids and step
// names have no "=", so the id names one step run, and as its Nats-Msg-Id
// it makes enqueueing the run twice store it once.
func StepTaskID(workflow, step string, run int) string {
	if run == 0 {
		return workflow + "=" + step
	}
	return workflow + "=" + step + "=" + strconv.Itoa(run)
}

// Ref names the step a task runs.
type Ref struct {
	Workflow string
	Step     string
	TaskID   string
}

// RefOf returns the step a task with headers h and id taskID runs, and
// false for a task that is not a workflow step.
func RefOf(h nats.Header, taskID string) (Ref, bool) {
	wf, step := h.Get(HeaderWorkflow), h.Get(HeaderStep)
	if wf == "" || step == "" {
		return Ref{}, false
	}
	return Ref{Workflow: wf, Step: step, TaskID: taskID}, true
}

// Record is the workflow's own value (<id>.wf): everything a finishing
// step updates, in one compare-and-set.
type Record struct {
	ID      string `json:"id"`
	Version int    `json:"version"`
	Policy  Policy `json:"on_error"`
	// State is running until every step is terminal (and the on-failure
	// step, if one ran), then completed, failed or cancelled.
	State State `json:"state"`
	// Steps is the number of steps, the on-failure step not counted.
	Steps int `json:"steps"`
	// OnFailure names the on-failure step, if any.
	OnFailure string `json:"on_failure,omitempty"`
	// Done and NotOK are bitmaps by step index: terminal steps, and those
	// of them that did not complete.
	Done  Bitmap `json:"done"`
	NotOK Bitmap `json:"not_ok"`
	// Waiting counts, for each pending step, the steps it still waits for
	// (Left) and how many of those finished did not complete (Bad).
	Waiting map[string]*Wait `json:"waiting,omitempty"`
	// Stopped is set when a step failed under the stop policy; Cancelled
	// when Cancel was called. Either makes every step that has not started
	// end cancelled.
	Stopped   bool `json:"stopped,omitempty"`
	Cancelled bool `json:"cancelled,omitempty"`
	// Failure is the first failed step.
	Failure *Failure `json:"failure,omitempty"`
	// OnFailureDone is set when the on-failure step is terminal.
	OnFailureDone bool `json:"on_failure_done,omitempty"`
	// Retries counts RetryFailed calls.
	Retries     int        `json:"retries,omitempty"`
	SubmittedAt time.Time  `json:"submitted_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// Wait is a pending step's count of inputs.
type Wait struct {
	Left int `json:"left"`
	Bad  int `json:"bad,omitempty"`
}

// StepRecord is one step's value (<id>.step.<name>): its definition and
// its state. On the wire the definition is under "def", the state's
// fields beside it.
type StepRecord struct {
	Step
	StepState
}

// StepState is the state part of a step record.
type StepState struct {
	// Index is the step's position in the document (the on-failure step
	// comes last).
	Index int `json:"index"`
	// Next names the steps that run after this one.
	Next  []string `json:"next,omitempty"`
	State State    `json:"state"`
	// Run counts the runs a retry started; TaskID is the current run's task.
	Run       int       `json:"run"`
	TaskID    string    `json:"task_id"`
	Error     string    `json:"error,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// stepRecordJSON is StepRecord on the wire.
type stepRecordJSON struct {
	Def json.RawMessage `json:"def"`
	StepState
}

// MarshalJSON writes the definition under def.
func (r StepRecord) MarshalJSON() ([]byte, error) {
	def, err := json.Marshal(r.Step)
	if err != nil {
		return nil, err
	}
	return json.Marshal(stepRecordJSON{Def: def, StepState: r.StepState})
}

// UnmarshalJSON reads a record written by MarshalJSON.
func (r *StepRecord) UnmarshalJSON(b []byte) error {
	var j stepRecordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = StepRecord{StepState: j.StepState}
	return json.Unmarshal(j.Def, &r.Step)
}

// Bitmap is a set of step indexes, base64 in JSON ([]byte).
type Bitmap []byte

func newBitmap(n int) Bitmap    { return make(Bitmap, (n+7)/8) }
func (b Bitmap) has(i int) bool { return i/8 < len(b) && b[i/8]&(1<<(i%8)) != 0 }
func (b Bitmap) set(i int)      { b[i/8] |= 1 << (i % 8) }
func (b Bitmap) clear(i int)    { b[i/8] &^= 1 << (i % 8) }

// Count returns how many indexes are set.
func (b Bitmap) Count() int { return b.count() }

func (b Bitmap) count() int {
	n := 0
	for _, c := range b {
		for ; c != 0; c &= c - 1 {
			n++
		}
	}
	return n
}

// StepStatus is one step in a Status: its record and, once its task ran,
// the task's result document.
type StepStatus struct {
	Name   string        `json:"name"`
	Type   string        `json:"type"`
	After  []string      `json:"after,omitempty"`
	State  State         `json:"state"`
	TaskID string        `json:"task_id,omitempty"`
	Run    int           `json:"run"`
	Error  string        `json:"error,omitempty"`
	Task   *spool.Result `json:"task,omitempty"`
	// OnFailure marks the on-failure step.
	OnFailure bool `json:"on_failure,omitempty"`
}

// Summary is a workflow in a List: its state and how many of its steps
// are done.
type Summary struct {
	ID          string     `json:"id"`
	State       State      `json:"state"`
	Done        int        `json:"done"`
	Total       int        `json:"total"`
	Failure     *Failure   `json:"failure,omitempty"`
	SubmittedAt time.Time  `json:"submitted_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// Status is a workflow's summary with its policy and each step's state.
type Status struct {
	Summary
	Policy  Policy       `json:"on_error"`
	Retries int          `json:"retries,omitempty"`
	Steps   []StepStatus `json:"steps"`
}

func (r *Record) summary() Summary {
	return Summary{ID: r.ID, State: r.State, Done: r.Done.count(), Total: r.Steps, Failure: r.Failure,
		SubmittedAt: r.SubmittedAt, FinishedAt: r.FinishedAt}
}
