package limits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
)

// Per-key ordering (Rule.Ordered) and fairness between keys (Rule.Fair).
//
// Enqueue order is the order of the key's tasks on its held subject
// spool.held.<keytoken>.<type> (Names.HeldSubject) in the task stream: a
// producer publishes a task of an ordered type that has a Spool-Key there
// instead of on its task subject, so the stream's sequence on that one
// subject is the key's enqueue order, and the server's per-subject index
// finds the key's oldest waiting task with one direct get. A task that
// reaches its task subject without passing there (enqueued before the
// rule, fired by a schedule, published by a client that does not know
// the rule) is moved there by the first worker that receives it: its
// place is then the order in which workers first saw those tasks.
//
// The key's turn is the lease key o.<type>.<key> (TurnKey), a Turn
// changed only by compare-and-set: the tasks released from the held
// subject that hold a place, at most the key's window (Rule.KeyWindow: 1
// for an ordered type, so one task at a time in order; the fair window for
// a fair type, so a key never has more than its window queued or running,
// however deep its backlog). Releasing the next task adds it to the turn,
// publishes a copy on its task subject carrying Spool-Order-Seq (its held
// sequence), and deletes the held copy, in that order: a crash in between
// leaves a task of the turn on the held subject, which the next Kick of
// the key (a park, a finish) releases again. A task keeps its place
// across retries, hand-backs and worker crashes (a killed worker's task
// comes back within AckWait and finds its place); the worker that
// completes or dead-letters it gives the place up before acking it
// (Finish). A release and a new task's arrival cannot miss each other:
// the arriving side parks first and reads the turn after, the finishing
// side frees its place first and looks for parked tasks after.
//
// The turn key has no TTL: it holds the key's position, and outlives idle
// spells (one small key per ordered key ever used).

// Turn is the value of a turn key.
type Turn struct {
	// Seq is the held sequence of the last task released.
	Seq uint64 `json:"seq"`
	// Running lists the held sequences of the released tasks that hold a
	// place (until they complete, die or, with OrderSkip, fail once).
	Running []uint64 `json:"running,omitempty"`
}

func (t Turn) holds(seq uint64) bool {
	for _, s := range t.Running {
		if s == seq {
			return true
		}
	}
	return false
}

// TurnKey is the lease key of the turn of key among the type's tasks.
func turnKey(typ, key string) string { return "o." + typ + "." + EncodeKey(key) }

// Decision is what a worker does with a released task.
type Decision int

const (
	// RunHead: the task holds a place in its key's turn; run it, and
	// Finish it when it completes or dies.
	RunHead Decision = iota
	// RunFree: the task's place was given up (a retry after OrderSkip, or
	// a run again after a crash): run it outside the turn.
	RunFree
	// WaitTurn: the key's window is full; hand the task back and try
	// again later.
	WaitTurn
)

// Turns runs the turn protocol over the task stream and the leases
// bucket. Its methods are safe for concurrent use. window is the key's
// window (Rule.KeyWindow), at least 1.
type Turns struct {
	// locks serialize this process's writes of a key's turn (by a hash of
	// type and key): concurrent finishers of one key would otherwise lose
	// compare-and-sets to each other and retry, a cost growing with the
	// square of the key's window. Other processes still race by CAS.
	locks  [turnLockStripes]sync.Mutex
	js     jetstream.JetStream
	tasks  jetstream.Stream
	leases jetstream.KeyValue
	names  spool.Names
}

// turnLockStripes is the number of local turn locks of a Turns.
const turnLockStripes = 256

// lock takes the local lock of the key's turn and returns its unlock.
func (t *Turns) lock(typ, key string) func() {
	h := fnv.New32a()
	h.Write([]byte(typ))
	h.Write([]byte{0})
	h.Write([]byte(key))
	mu := &t.locks[h.Sum32()%turnLockStripes]
	mu.Lock()
	return mu.Unlock
}

// NewTurns binds the task stream and the leases bucket.
func NewTurns(ctx context.Context, js jetstream.JetStream, names spool.Names) (*Turns, error) {
	tasks, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		return nil, fmt.Errorf("binding stream %q: %w", names.TaskStream(), err)
	}
	leases, err := js.KeyValue(ctx, names.LeasesBucket())
	if err != nil {
		return nil, fmt.Errorf("binding bucket %q: %w", names.LeasesBucket(), err)
	}
	return &Turns{js: js, tasks: tasks, leases: leases, names: names}, nil
}

// Park publishes msg (a task message for target, its task subject) on the
// held subject of key among typ's tasks and then releases tasks of the key
// while its window has room. msgID (if not empty) replaces the message's
// Nats-Msg-Id, which dedups a retried park. It returns the held copy's
// ack, also when only the release failed (with the error): a retry stores
// nothing twice.
func (t *Turns) Park(ctx context.Context, typ, key string, window int, target, msgID string, msg *nats.Msg) (*jetstream.PubAck, error) {
	m := &nats.Msg{Subject: target, Header: nats.Header{}, Data: msg.Data}
	for k, v := range msg.Header {
		m.Header[k] = v
	}
	if msgID != "" {
		m.Header.Set(spool.HeaderMsgID, msgID)
	}
	t.Hold(typ, key, m)
	ack, err := t.js.PublishMsg(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("parking a task of %q on %s: %w", typ, m.Subject, err)
	}
	return ack, t.Kick(ctx, typ, key, window)
}

// Hold turns msg, a task message of typ with key for its task subject,
// into its parked copy: on the key's held subject, with the task subject
// in Spool-Held-Target. Publishing it parks the task; Kick then releases
// it when the key's window has room.
func (t *Turns) Hold(typ, key string, msg *nats.Msg) { Hold(t.names, typ, key, msg) }

// Hold is Turns.Hold for a caller without Turns (a producer, which parks
// tasks and asks the fleet to start the key with a kick request, see
// Names.KickSubject).
func Hold(names spool.Names, typ, key string, msg *nats.Msg) {
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	msg.Header.Del(spool.HeaderOrderSeq)
	msg.Header.Set(spool.HeaderHeldTarget, msg.Subject)
	msg.Subject = names.HeldSubject(EncodeKey(key), typ)
}

// Kick releases the key's next parked tasks while its window has room.
// The turn moves first and the task is released after it, so two kickers
// never release one place twice: the one whose compare-and-set loses
// releases nothing. A task of the turn still on the held subject (its
// releaser stopped midway) is released again; its Nats-Msg-Id makes that
// one message within the duplicate window.
func (t *Turns) Kick(ctx context.Context, typ, key string, window int) error {
	unlock := t.lock(typ, key)
	defer unlock()
	return t.kick(ctx, typ, key, window, nil, 0)
}

// kick is Kick under the key's local lock; known, when not nil, is the
// turn at revision rev, read or written just before (saves a read).
func (t *Turns) kick(ctx context.Context, typ, key string, window int, known *Turn, rev uint64) error {
	window = max(1, window)
	held := t.names.HeldSubject(EncodeKey(key), typ)
	for {
		var turn Turn
		if known != nil {
			turn, known = *known, nil
		} else {
			var err error
			if turn, rev, err = t.get(ctx, typ, key); err != nil {
				return err
			}
		}
		m, err := t.next(ctx, held, 0)
		if err != nil || m == nil {
			return err
		}
		if m.Sequence <= turn.Seq {
			if turn.holds(m.Sequence) {
				// Its releaser stopped between the turn and the release.
				if err := t.release(ctx, m); err != nil {
					return err
				}
			} else if err := t.delete(ctx, m.Sequence); err != nil {
				// Released already; a crash kept its held copy.
				return err
			}
			known = &turn // unchanged
			continue
		}
		if len(turn.Running) >= window {
			return nil
		}
		next := Turn{Seq: m.Sequence, Running: append(turn.Running[:len(turn.Running):len(turn.Running)], m.Sequence)}
		nrev, err := t.putRev(ctx, typ, key, next, rev)
		if errors.Is(err, errTurnMoved) {
			continue
		}
		if err != nil {
			return err
		}
		if err := t.release(ctx, m); err != nil {
			return err
		}
		if len(next.Running) >= window {
			// m was the first held message: none before it is left to
			// release again, and the window is full.
			return nil
		}
		known, rev = &next, nrev
	}
}

// next reads the first message on the held subject from seq on; nil when
// there is none.
func (t *Turns) next(ctx context.Context, held string, seq uint64) (*jetstream.RawStreamMsg, error) {
	m, err := t.tasks.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(held))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the next task on %s: %w", held, err)
	}
	return m, nil
}

// release publishes the held message m on its task subject, carrying its
// held sequence, and deletes the held copy. Nats-Msg-Id makes a second
// release of it one message within the duplicate window.
func (t *Turns) release(ctx context.Context, m *jetstream.RawStreamMsg) error {
	msg, id, err := Unhold(t.names, m)
	if err != nil {
		return err
	}
	seq := strconv.FormatUint(m.Sequence, 10)
	msg.Header.Set(spool.HeaderOrderSeq, seq)
	msg.Header.Set(spool.HeaderMsgID, id+"-turn-"+seq)
	if _, err := t.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("releasing held task %d to %s: %w", m.Sequence, msg.Subject, err)
	}
	return t.delete(ctx, m.Sequence)
}

// directGetHeaders are the headers a direct get adds to a stored message.
var directGetHeaders = []string{
	jetstream.StreamHeader, jetstream.SequenceHeader, jetstream.SubjectHeader,
	"Nats-Time-Stamp", jetstream.LastSequenceHeader, "Nats-Num-Pending",
}

func (t *Turns) delete(ctx context.Context, seq uint64) error {
	err := t.tasks.DeleteMsg(ctx, seq)
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) && !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		return fmt.Errorf("deleting held task %d: %w", seq, err)
	}
	return nil
}

// Admit decides whether the released task with held sequence seq runs
// now.
func (t *Turns) Admit(ctx context.Context, typ, key string, window int, seq uint64) (Decision, error) {
	window = max(1, window)
	for {
		turn, rev, err := t.get(ctx, typ, key)
		if err != nil {
			return 0, err
		}
		switch {
		case turn.holds(seq):
			return RunHead, nil
		case seq <= turn.Seq:
			return RunFree, nil
		case len(turn.Running) >= window:
			return WaitTurn, nil
		}
		// Ahead of the turn: the turn moves before a release, so only a
		// turn key deleted by hand gets here; the task takes a place.
		next := Turn{Seq: seq, Running: append(turn.Running[:len(turn.Running):len(turn.Running)], seq)}
		err = t.put(ctx, typ, key, next, rev)
		if errors.Is(err, errTurnMoved) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return RunHead, nil
	}
}

// Finish gives up the place of the task with held sequence seq, if it
// holds one, and releases the key's next parked tasks while its window has
// room. A worker calls it for every released task before the task's
// message is acked: a worker killed between the two sees the task again,
// and its Finish then does the kick the killed one did not.
func (t *Turns) Finish(ctx context.Context, typ, key string, window int, seq uint64) error {
	unlock := t.lock(typ, key)
	defer unlock()
	turn, rev, _, err := t.leave(ctx, typ, key, seq)
	if err != nil {
		return err
	}
	// Also when the place was given up already (by this task's run before
	// a crash, which may have stopped before the kick): kick anyway.
	return t.kick(ctx, typ, key, window, &turn, rev)
}

// Leave gives up the place of the task with held sequence seq, if it holds
// one, without releasing the next task: for a caller that does not know
// the key's window (the DLQ router), which then asks the fleet to start the
// key with a kick request (Names.KickSubject). It reports whether the task
// held a place.
func (t *Turns) Leave(ctx context.Context, typ, key string, seq uint64) (bool, error) {
	unlock := t.lock(typ, key)
	defer unlock()
	_, _, held, err := t.leave(ctx, typ, key, seq)
	return held, err
}

// leave gives up the place of seq, if it holds one (held), and returns
// the turn after it with its revision.
func (t *Turns) leave(ctx context.Context, typ, key string, seq uint64) (_ Turn, rev uint64, held bool, _ error) {
	for {
		turn, rev, err := t.get(ctx, typ, key)
		if err != nil || !turn.holds(seq) {
			return turn, rev, false, err
		}
		next := Turn{Seq: turn.Seq, Running: make([]uint64, 0, len(turn.Running)-1)}
		for _, s := range turn.Running {
			if s != seq {
				next.Running = append(next.Running, s)
			}
		}
		rev, err = t.putRev(ctx, typ, key, next, rev)
		if errors.Is(err, errTurnMoved) {
			continue
		}
		return next, rev, err == nil, err
	}
}

// Unblock gives up every place of the key's turn, keeping its position
// (Turn.Seq), and returns the held sequences that held them: the operator's
// way out when a task holding a place left the stream without passing the
// turn on (purged, deleted by hand). Tasks released earlier that are still
// queued or running then run outside the turn (RunFree). The caller kicks
// the key afterwards.
func (t *Turns) Unblock(ctx context.Context, typ, key string) ([]uint64, error) {
	for {
		turn, rev, err := t.get(ctx, typ, key)
		if err != nil || len(turn.Running) == 0 {
			return nil, err
		}
		err = t.put(ctx, typ, key, Turn{Seq: turn.Seq}, rev)
		if errors.Is(err, errTurnMoved) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return turn.Running, nil
	}
}

// Get reads the turn of key among typ's tasks; the zero Turn when the key
// has none.
func (t *Turns) Get(ctx context.Context, typ, key string) (Turn, error) {
	turn, _, err := t.get(ctx, typ, key)
	return turn, err
}

var errTurnMoved = errors.New("the turn changed meanwhile")

// get reads the turn of key; rev 0: no turn key yet.
func (t *Turns) get(ctx context.Context, typ, key string) (Turn, uint64, error) {
	e, err := t.leases.Get(ctx, turnKey(typ, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Turn{}, 0, nil
	}
	if err != nil {
		return Turn{}, 0, fmt.Errorf("reading the turn of key %q of %q: %w", key, typ, err)
	}
	var turn Turn
	if err := json.Unmarshal(e.Value(), &turn); err != nil {
		return Turn{}, 0, fmt.Errorf("decoding the turn of key %q of %q: %w", key, typ, err)
	}
	return turn, e.Revision(), nil
}

// put writes the turn of key if it is still at revision rev (0: absent);
// errTurnMoved when it is not.
func (t *Turns) put(ctx context.Context, typ, key string, turn Turn, rev uint64) error {
	_, err := t.putRev(ctx, typ, key, turn, rev)
	return err
}

// putRev is put returning the turn's new revision.
func (t *Turns) putRev(ctx context.Context, typ, key string, turn Turn, rev uint64) (uint64, error) {
	b, err := json.Marshal(turn)
	if err != nil {
		return 0, fmt.Errorf("encoding a turn: %w", err)
	}
	k := turnKey(typ, key)
	var next uint64
	if rev == 0 {
		next, err = t.leases.Create(ctx, k, b)
	} else {
		next, err = t.leases.Update(ctx, k, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, errTurnMoved
	}
	if err != nil {
		return 0, fmt.Errorf("writing the turn of key %q of %q: %w", key, typ, err)
	}
	return next, nil
}

// OrderSeq reads a released task's held sequence; ok is false for a task
// that has not passed through a held subject.
func OrderSeq(h nats.Header) (seq uint64, ok bool) {
	v := h.Get(spool.HeaderOrderSeq)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, err == nil && n > 0
}

// Unhold turns a held message (a parked task of an ordered key or of a
// waiting room, read by a direct get) into the copy to publish on its
// task subject: its headers without Spool-Held-Target and the headers the
// direct get added, with Spool-Task-Id set. Slots it holds while it waits
// (Spool-Slot) stay.
func Unhold(names spool.Names, m *jetstream.RawStreamMsg) (*nats.Msg, string, error) {
	target := m.Header.Get(spool.HeaderHeldTarget)
	if target == "" {
		return nil, "", fmt.Errorf("held task %d on %s has no %s", m.Sequence, m.Subject, spool.HeaderHeldTarget)
	}
	h := nats.Header{}
	for k, v := range m.Header {
		h[k] = v
	}
	h.Del(spool.HeaderHeldTarget)
	// A direct get adds the stored message's place (Nats-Subject,
	// Nats-Sequence, ...) to its headers; the released copy must not carry
	// the held copy's, or a direct get of it reads the held subject.
	for _, k := range directGetHeaders {
		h.Del(k)
	}
	id := names.TaskID(m.Header, names.TaskStream(), m.Sequence)
	h.Set(spool.HeaderTaskID, id)
	// A task a producer held for its key's turn was enqueued when its
	// held copy was stored.
	spool.KeepEnqueuedAt(h, m.Time)
	return &nats.Msg{Subject: target, Header: h, Data: m.Data}, id, nil
}
