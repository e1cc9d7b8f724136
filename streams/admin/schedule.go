package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/robfig/cron/v3"

	spool "github.com/spoolq/spool/shared"
)

// ErrScheduleNotFound: no periodic schedule has that name.
var ErrScheduleNotFound = errors.New("schedule not found")

// Schedule is a periodic task: the server's repeating message schedule on
// spool.cron.<name> fires a task of Type at Priority with Payload, headers
// and options at every tick, once for the whole system (no beat process:
// the schedule lives in the task stream, replicated with it).
type Schedule struct {
	// Name identifies the schedule: 1 to 128 characters of [A-Za-z0-9_=-].
	Name string `json:"name"`
	// Spec is "@every <duration ≥ 1s>", a cron expression of 5 fields
	// (min hour dom mon dow) or 6 (sec min hour dom mon dow), or one of
	// @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly.
	Spec string `json:"spec"`
	// TimeZone is an IANA zone for cron specs (Europe/Paris); default UTC.
	TimeZone string         `json:"time_zone,omitempty"`
	Type     string         `json:"type"`
	Priority spool.Priority `json:"priority"`
	Payload  []byte         `json:"payload,omitempty"`
	// MaxRetries and Timeout are the tasks' options (as for a task).
	MaxRetries *int              `json:"max_retries,omitempty"`
	Timeout    time.Duration     `json:"timeout_ns,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`

	// Read back by Schedules: whether it is paused, when it fires next
	// (nil while paused), and when it was last set.
	Paused    bool       `json:"paused"`
	NextRun   *time.Time `json:"next_run,omitempty"`
	UpdatedAt time.Time  `json:"updated_at,omitzero"`
}

// Headers of a paused schedule: the schedule headers renamed, so the
// message no longer fires and can be restored.
const (
	headerPausedSchedule = "Spool-Paused-Schedule"
	headerPausedTarget   = "Spool-Paused-Target"
	headerPausedTimeZone = "Spool-Paused-Time-Zone"
)

var cronParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// normalizeSpec validates spec and tz and returns the spec the server
// understands (5-field crons get a seconds field of 0).
func normalizeSpec(spec, tz string) (string, *time.Location, error) {
	spec = strings.TrimSpace(spec)
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		dur, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || dur < time.Second {
			return "", nil, fmt.Errorf("spec %q: @every needs a Go duration of at least 1s, such as @every 30s", spec)
		}
		if tz != "" {
			return "", nil, fmt.Errorf("time zone %q: only cron specs take a time zone, not @every", tz)
		}
		return "@every " + dur.String(), nil, nil
	}
	loc := time.UTC
	if tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil {
			return "", nil, fmt.Errorf("time zone %q: want an IANA zone such as Europe/Paris: %w", tz, err)
		}
	}
	switch spec {
	case "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly":
		return spec, loc, nil
	}
	fields := strings.Fields(spec)
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return "", nil, fmt.Errorf("spec %q: want @every <duration>, @hourly/@daily/…, or a cron expression of 5 or 6 fields", spec)
	}
	spec = strings.Join(fields, " ")
	if _, err := cronParser.Parse(spec); err != nil {
		return "", nil, fmt.Errorf("spec %q: %w", spec, err)
	}
	return spec, loc, nil
}

// nextRun is when spec fires next after now; for @every, counted from
// since (when the schedule was set).
func nextRun(spec string, loc *time.Location, since, now time.Time) *time.Time {
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 {
			return nil
		}
		t0 := since.Round(time.Second)
		k := now.Sub(t0)/dur + 1
		next := t0.Add(k * dur).UTC()
		return &next
	}
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return nil
	}
	if loc == nil {
		loc = time.UTC
	}
	next := sched.Next(now.In(loc)).UTC()
	return &next
}

// SetSchedule creates the periodic schedule s.Name, or replaces it (a
// paused one is resumed). The first tick comes after one period.
func (c *Client) SetSchedule(ctx context.Context, s Schedule) error {
	subject, err := c.names.CronSubject(s.Name)
	if err != nil {
		return spool.NewFieldError("name", err)
	}
	spec, _, err := normalizeSpec(s.Spec, s.TimeZone)
	if err != nil {
		return spool.NewFieldError("spec", err)
	}
	fields := spool.TaskFields{Type: s.Type, Priority: s.Priority, Meta: spool.Meta{MaxRetries: s.MaxRetries, Timeout: s.Timeout}, Headers: s.Headers}
	if err := fields.Validate(); err != nil {
		return err
	}
	target, err := c.names.TaskSubject(s.Priority, s.Type)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subject)
	m.Data = s.Payload
	for k, v := range s.Headers {
		m.Header.Set(k, v)
	}
	if err := fields.Meta.Encode(m.Header); err != nil {
		return err
	}
	m.Header.Set(spool.HeaderScheduleName, s.Name)
	m.Header.Set(spool.HeaderSchedule, spec)
	m.Header.Set(spool.HeaderScheduleTarget, target)
	if s.TimeZone != "" {
		m.Header.Set(spool.HeaderScheduleTimeZone, s.TimeZone)
	}
	if err := c.publishSchedule(ctx, m); err != nil {
		return fmt.Errorf("setting schedule %q: %w", s.Name, err)
	}
	c.logger.InfoContext(ctx, "schedule set", "schedule", s.Name, "spec", spec, "target", target)
	return nil
}

func (c *Client) publishSchedule(ctx context.Context, m *nats.Msg) error {
	_, err := call(ctx, c, "publishing "+m.Subject, func(ctx context.Context) (*jetstream.PubAck, error) {
		return c.js.PublishMsg(ctx, m, jetstream.WithExpectStream(c.names.TaskStream()))
	})
	return err
}

// Schedules lists the periodic schedules, by name.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	return call(ctx, c, "listing schedules", func(ctx context.Context) ([]Schedule, error) {
		tasks, err := c.js.Stream(ctx, c.names.TaskStream())
		if err != nil {
			return nil, fmt.Errorf("reading stream %q: %w", c.names.TaskStream(), err)
		}
		info, err := tasks.Info(ctx, jetstream.WithSubjectFilter(c.names.CronFilter()))
		if err != nil {
			return nil, fmt.Errorf("listing schedules: %w", err)
		}
		var out []Schedule
		for _, subj := range slices.Sorted(maps.Keys(info.State.Subjects)) {
			msg, err := tasks.GetLastMsgForSubject(ctx, subj)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("reading schedule %s: %w", subj, err)
			}
			out = append(out, c.decodeSchedule(msg, time.Now()))
		}
		return out, nil
	})
}

// GetSchedule reads one schedule; ErrScheduleNotFound when none has name.
func (c *Client) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	msg, err := c.lastSchedule(ctx, name)
	if err != nil {
		return Schedule{}, err
	}
	return c.decodeSchedule(msg, time.Now()), nil
}

func (c *Client) lastSchedule(ctx context.Context, name string) (*jetstream.RawStreamMsg, error) {
	subject, err := c.names.CronSubject(name)
	if err != nil {
		return nil, spool.NewFieldError("name", err)
	}
	return call(ctx, c, "reading schedule "+name, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		tasks, err := c.js.Stream(ctx, c.names.TaskStream())
		if err != nil {
			return nil, fmt.Errorf("reading stream %q: %w", c.names.TaskStream(), err)
		}
		msg, err := tasks.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
		}
		if err != nil {
			return nil, fmt.Errorf("reading schedule %q: %w", name, err)
		}
		return msg, nil
	})
}

func (c *Client) decodeSchedule(msg *jetstream.RawStreamMsg, now time.Time) Schedule {
	h := msg.Header
	s := Schedule{Payload: msg.Data, UpdatedAt: msg.Time}
	s.Name = h.Get(spool.HeaderScheduleName)
	if s.Name == "" {
		s.Name = strings.TrimPrefix(msg.Subject, c.names.Prefix()+".cron.")
	}
	s.Spec, s.TimeZone = h.Get(spool.HeaderSchedule), h.Get(spool.HeaderScheduleTimeZone)
	target := h.Get(spool.HeaderScheduleTarget)
	if s.Spec == "" {
		s.Paused = true
		s.Spec, s.TimeZone, target = h.Get(headerPausedSchedule), h.Get(headerPausedTimeZone), h.Get(headerPausedTarget)
	}
	if p, typ, err := c.names.ParseTaskSubject(target); err == nil {
		s.Priority, s.Type = p, typ
	}
	if meta, err := spool.DecodeMeta(h); err == nil {
		s.MaxRetries, s.Timeout = meta.MaxRetries, meta.Timeout
	}
	for k := range h {
		if strings.HasPrefix(k, "Nats-") || strings.HasPrefix(k, "Spool-") {
			continue
		}
		if s.Headers == nil {
			s.Headers = map[string]string{}
		}
		s.Headers[k] = h.Get(k)
	}
	if !s.Paused {
		loc := time.UTC
		if s.TimeZone != "" {
			if l, err := time.LoadLocation(s.TimeZone); err == nil {
				loc = l
			}
		}
		s.NextRun = nextRun(s.Spec, loc, msg.Time, now)
	}
	return s
}

// PauseSchedule stops schedule name from firing until ResumeSchedule; it
// keeps its definition. Pausing a paused schedule does nothing.
func (c *Client) PauseSchedule(ctx context.Context, name string) error {
	return c.switchSchedule(ctx, name, true)
}

// ResumeSchedule makes a paused schedule fire again; the next tick comes
// one period after the resume. Resuming a running schedule does nothing.
func (c *Client) ResumeSchedule(ctx context.Context, name string) error {
	return c.switchSchedule(ctx, name, false)
}

func (c *Client) switchSchedule(ctx context.Context, name string, pause bool) error {
	msg, err := c.lastSchedule(ctx, name)
	if err != nil {
		return err
	}
	paused := msg.Header.Get(spool.HeaderSchedule) == ""
	if paused == pause {
		return nil
	}
	m := nats.NewMsg(msg.Subject)
	m.Data = msg.Data
	rename := [][2]string{
		{spool.HeaderSchedule, headerPausedSchedule},
		{spool.HeaderScheduleTarget, headerPausedTarget},
		{spool.HeaderScheduleTimeZone, headerPausedTimeZone},
	}
	for k, vs := range msg.Header {
		if strings.HasPrefix(k, "Nats-") && !slices.ContainsFunc(rename, func(r [2]string) bool { return r[0] == k }) {
			continue // stream metadata a direct get adds
		}
		m.Header[k] = vs
	}
	for _, r := range rename {
		from, to := r[0], r[1]
		if !pause {
			from, to = to, from
		}
		if v := m.Header.Get(from); v != "" {
			m.Header.Set(to, v)
		}
		m.Header.Del(from)
	}
	if err := c.publishSchedule(ctx, m); err != nil {
		return fmt.Errorf("switching schedule %q: %w", name, err)
	}
	if pause {
		// A plain message does not roll the schedule up: remove it.
		if err := c.deleteMsg(ctx, msg.Sequence); err != nil {
			return fmt.Errorf("pausing schedule %q: %w", name, err)
		}
	}
	c.logger.InfoContext(ctx, "schedule switched", "schedule", name, "paused", pause)
	return nil
}

// DeleteSchedule removes schedule name; ErrScheduleNotFound when none has
// it.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	msg, err := c.lastSchedule(ctx, name)
	if err != nil {
		return err
	}
	// One message per schedule subject (the server rolls schedules up,
	// and a pause replaces its message): delete it by sequence.
	if err := c.deleteMsg(ctx, msg.Sequence); err != nil {
		return fmt.Errorf("deleting schedule %q: %w", name, err)
	}
	c.logger.InfoContext(ctx, "schedule deleted", "schedule", name)
	return nil
}

func (c *Client) deleteMsg(ctx context.Context, seq uint64) error {
	_, err := call(ctx, c, fmt.Sprintf("deleting message %d of %s", seq, c.names.TaskStream()), func(ctx context.Context) (struct{}, error) {
		tasks, err := c.js.Stream(ctx, c.names.TaskStream())
		if err != nil {
			return struct{}{}, err
		}
		err = tasks.DeleteMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return struct{}{}, nil // gone already
		}
		return struct{}{}, err
	})
	return err
}
