package target

import "os"

// SetSyncDir replaces the state file's directory fsync until the returned function runs.
func SetSyncDir(f func(*os.File) error) (restore func()) {
	old := syncDir
	syncDir = f
	return func() { syncDir = old }
}
