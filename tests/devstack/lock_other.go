//go:build !unix

package devstack

import "os"

// tryLock does not lock where flock is missing: the dev stack targets
// Linux and macOS.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlockFile(*os.File) error { return nil }
