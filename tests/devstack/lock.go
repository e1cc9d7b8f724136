package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lockName is the lock file a running stack holds in its store directory.
const lockName = "spool-dev.lock"

// StoreInUseError is Start's error when another stack (or any process
// holding the lock) runs on the same store directory. Start fails at once
// and never opens the store, so the running stack's files are untouched.
type StoreInUseError struct {
	// Dir is the store directory; PID the process holding it (0 when it
	// could not be read).
	Dir string
	PID int
}

func (e *StoreInUseError) Error() string {
	holder := "another spool-dev"
	if e.PID > 0 {
		holder += fmt.Sprintf(" (pid %d)", e.PID)
	}
	return fmt.Sprintf("the store %s is in use by %s: stop it, or give this stack its own store (SPOOL_DEV_STORE or --store)", e.Dir, holder)
}

// ErrStoreInUse matches a *StoreInUseError with errors.Is.
var ErrStoreInUse = errors.New("store in use")

// Is reports whether target is ErrStoreInUse.
func (e *StoreInUseError) Is(target error) bool { return target == ErrStoreInUse }

// storeLock is the held lock of a store directory.
type storeLock struct{ f *os.File }

// lockStore creates dir and takes its lock without waiting, writing this
// process's id into the lock file for the next one's message. The lock is
// the operating system's (flock), so it ends with the process even on a
// crash: a stale file never blocks a new stack.
func lockStore(dir string) (*storeLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the store %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the store lock %s: %w", path, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the store %s: %w", dir, err)
	}
	if !held {
		b, _ := os.ReadFile(path) // the holder's pid, for the message only
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		f.Close()
		return nil, &StoreInUseError{Dir: dir, PID: pid}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &storeLock{f: f}, nil
}

// unlock releases the lock; a nil lock is a no-op.
func (l *storeLock) unlock() {
	if l == nil || l.f == nil {
		return
	}
	_ = unlockFile(l.f)
	_ = l.f.Close()
	l.f = nil
}
