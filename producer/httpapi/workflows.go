package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spoolq/spool/shared/workflow"
)

// Error codes of the workflow routes.
const (
	CodeInvalidWorkflow     = "invalid_workflow"
	CodeWorkflowExists      = "workflow_exists"
	CodeWorkflowNotFinished = "workflow_not_finished"
)

// routeWorkflows registers the workflow routes: submit, list, status
// (optionally waiting for the end), cancel and retry from the failed steps.
func (h *handler) routeWorkflows(mux *http.ServeMux) {
	mux.Handle("POST /v1/workflows", h.auth(h.submitWorkflow))
	mux.Handle("GET /v1/workflows", h.auth(h.listWorkflows))
	mux.Handle("GET /v1/workflows/{id}", h.auth(h.workflowStatus))
	mux.Handle("POST /v1/workflows/{id}/cancel", h.auth(h.cancelWorkflow))
	mux.Handle("POST /v1/workflows/{id}/retry", h.auth(h.retryWorkflow))
}

// workflowError maps the workflow store's errors to API errors.
func workflowError(err error) *apiError {
	switch {
	case errors.Is(err, workflow.ErrInvalid):
		return newError(http.StatusBadRequest, CodeInvalidWorkflow, "", err.Error())
	case errors.Is(err, workflow.ErrExists):
		return newError(http.StatusConflict, CodeWorkflowExists, "id", err.Error())
	case errors.Is(err, workflow.ErrNotFound):
		return newError(http.StatusNotFound, CodeNotFound, "id", err.Error())
	case errors.Is(err, workflow.ErrNotFinished):
		return newError(http.StatusConflict, CodeWorkflowNotFinished, "id", err.Error())
	}
	return fromError(err)
}

// submitWorkflow: the body is a workflow document (docs/contract.md).
func (h *handler) submitWorkflow(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, workflow.MaxDocBytes)
	if err != nil {
		writeError(w, h.logger, r, fromError(err))
		return
	}
	doc, err := workflow.Decode(body)
	if err != nil {
		writeError(w, h.logger, r, workflowError(err))
		return
	}
	id, err := h.client.SubmitWorkflow(r.Context(), doc)
	if err != nil {
		writeError(w, h.logger, r, workflowError(err))
		return
	}
	writeJSON(w, h.logger, r, http.StatusCreated, map[string]any{"id": id, "steps": len(doc.Steps)})
}

func (h *handler) listWorkflows(w http.ResponseWriter, r *http.Request) {
	list, err := h.client.Workflows(r.Context())
	if err != nil {
		writeError(w, h.logger, r, workflowError(err))
		return
	}
	writeJSON(w, h.logger, r, http.StatusOK, map[string]any{"workflows": list})
}

// workflowStatus answers the status; with ?wait=<duration> it first waits
// up to that long (at most MaxWait) for the workflow to finish.
func (h *handler) workflowStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if waitParam := r.URL.Query().Get("wait"); waitParam != "" {
		wait, err := time.ParseDuration(waitParam)
		if err != nil || wait <= 0 || wait > h.opts.MaxWait {
			writeError(w, h.logger, r, newError(http.StatusBadRequest, CodeInvalidWait, "wait",
				fmt.Sprintf("wait %q must be a duration from 1ms to %s", waitParam, h.opts.MaxWait)))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		_, err = h.client.WaitWorkflow(ctx, id)
		cancel()
		if err != nil && (ctx.Err() == nil || r.Context().Err() != nil) {
			writeError(w, h.logger, r, workflowError(err))
			return
		}
	}
	st, err := h.client.WorkflowStatus(r.Context(), id)
	if err != nil {
		writeError(w, h.logger, r, workflowError(err))
		return
	}
	writeJSON(w, h.logger, r, http.StatusOK, st)
}

func (h *handler) cancelWorkflow(w http.ResponseWriter, r *http.Request) {
	h.workflowOp(w, r, h.client.CancelWorkflow, func(rec workflow.Record) map[string]any {
		return map[string]any{"id": rec.ID, "state": rec.State, "cancelled": rec.Cancelled}
	})
}

func (h *handler) retryWorkflow(w http.ResponseWriter, r *http.Request) {
	h.workflowOp(w, r, h.client.RetryWorkflow, func(rec workflow.Record) map[string]any {
		return map[string]any{"id": rec.ID, "state": rec.State, "retries": rec.Retries}
	})
}

// workflowOp runs op on the workflow of the path and answers with the
// fields answer picks from the record.
func (h *handler) workflowOp(w http.ResponseWriter, r *http.Request,
	op func(context.Context, string) (workflow.Record, error), answer func(workflow.Record) map[string]any) {
	rec, err := op(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, h.logger, r, workflowError(err))
		return
	}
	writeJSON(w, h.logger, r, http.StatusOK, answer(rec))
}
