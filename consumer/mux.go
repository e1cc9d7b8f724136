package consumer

import (
	"context"
	"fmt"
	"slices"
	"sync"

	spool "github.com/spoolq/spool/shared"
)

// Mux routes tasks to handlers by exact task type, like http.ServeMux.
// Registering a type twice panics, as http.ServeMux does: it is a programming
// error found at start-up.
type Mux struct {
	mu         sync.RWMutex
	handlers   map[string]Handler
	middleware []Middleware
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{handlers: map[string]Handler{}} }

var _ Handler = (*Mux)(nil)

// Handle registers h for typ. It panics on an invalid type, a nil handler or
// a duplicate registration.
func (m *Mux) Handle(typ string, h Handler) {
	if err := spool.ValidateType(typ); err != nil {
		panic(fmt.Sprintf("consumer: Handle: %v", err))
	}
	if h == nil {
		panic(fmt.Sprintf("consumer: Handle(%q): nil handler", typ))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.handlers[typ]; dup {
		panic(fmt.Sprintf("consumer: Handle: a handler for %q is already registered", typ))
	}
	m.handlers[typ] = h
}

// HandleFunc registers f for typ.
func (m *Mux) HandleFunc(typ string, f func(ctx context.Context, t *Task) ([]byte, error)) {
	m.Handle(typ, HandlerFunc(f))
}

// Use appends middleware; the first added is the outermost. It applies to
// every handler, registered before or after.
func (m *Mux) Use(mw ...Middleware) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.middleware = append(m.middleware, mw...)
}

// Handler returns the handler for typ, wrapped in the middleware, and
// whether one is registered.
func (m *Mux) Handler(typ string) (Handler, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	h, ok := m.handlers[typ]
	if !ok {
		return nil, false
	}
	for _, mw := range slices.Backward(m.middleware) {
		h = mw(h)
	}
	return h, true
}

// Types lists the registered types, sorted.
func (m *Mux) Types() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	types := make([]string, 0, len(m.handlers))
	for t := range m.handlers {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// ProcessTask dispatches t to its type's handler; without one it returns a
// permanent ErrNoHandler.
func (m *Mux) ProcessTask(ctx context.Context, t *Task) ([]byte, error) {
	h, ok := m.Handler(t.Type)
	if !ok {
		return nil, Permanent(fmt.Errorf("%w %q", ErrNoHandler, t.Type))
	}
	return h.ProcessTask(ctx, t)
}
