package target

import (
	"os"
	"time"
)

// SetSyncDir replaces the state file's directory fsync until the returned function runs.
func SetSyncDir(f func(*os.File) error) (restore func()) {
	old := syncDir
	syncDir = f
	return func() { syncDir = old }
}

// SetShutdownIdleFloor replaces the floor of the shutdown idle timeout until the returned
// function runs.
func SetShutdownIdleFloor(d time.Duration) (restore func()) {
	old := shutdownIdleFloor
	shutdownIdleFloor = d
	return func() { shutdownIdleFloor = old }
}

// SetAuthSlots makes targets created from now on run at most n authentication steps at
// once, until the returned function runs.
func SetAuthSlots(n int) (restore func()) {
	old := authSlotsFixed
	authSlotsFixed = n
	return func() { authSlotsFixed = old }
}
