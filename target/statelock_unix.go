//go:build unix

package target

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockStateFile takes the state file's lock: an exclusive flock(2) on path+".lock", held
// by the returned file until it is closed (or the process ends, however it ends). Two
// targets sharing one state file would each rewrite it from their own records and drop the
// other's; the lock makes the second refuse to start. The lock file holds the holder's PID
// (for the error) and is never removed: removing it would let a third process lock a new
// file while the second still waits on the old one.
//
// A directory the target may not write in yields no lock and no error: the state file
// cannot be replaced there either, so nothing is written that another process could lose
// (a host asking for Persist Through Power Loss gets an error then, as before).
func lockStateFile(path string) (*os.File, error) {
	lp := path + ".lock"
	f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, fs.ErrPermission) {
		// A lock file this user may read but not write (another user's, group-readable):
		// flock(2) works on a descriptor opened for reading too.
		if ro, rerr := os.OpenFile(lp, os.O_RDONLY|unix.O_CLOEXEC, 0); rerr == nil {
			f, err = ro, nil
		}
	}
	if err != nil && (errors.Is(err, unix.EROFS) || errors.Is(err, fs.ErrPermission) && unix.Access(filepath.Dir(path), unix.W_OK) != nil) {
		return nil, nil // nothing can be written there: no lock needed
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("state file %s: its lock file %s cannot be opened by this user (another user's, e.g. root's?): "+
			"chown it to the user gonvmf runs as, or remove it with no gonvmf running: %w", path, lp, err)
	}
	if err != nil {
		return nil, fmt.Errorf("state file %s: creating its lock file: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(lp); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = "process " + strconv.Itoa(pid)
			}
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state file %s: in use by %s (it holds the lock %s); give each target its own state_file, or stop the other one", path, holder, lp)
		}
		return nil, fmt.Errorf("state file %s: locking %s: %w", path, lp, err)
	}
	// The PID is informative only; failing to record it is no reason to refuse.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
