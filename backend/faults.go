package backend

import (
	"sync"
)

// Faults injects errors into the system calls of the file and block backends (Spec.Faults),
// in the manner of pebble's error-injecting filesystem: tests of the layers above use it
// to see how they handle a failed fdatasync or write without a failing disk. The rbd
// backend takes it too: there a librbd flush is a sync and a librbd write a write, and the
// error (an errno; anything else counts as EIO) replaces the result librbd gives the
// operation, so a test sees a failing cluster; StallSizeReads holds up its reads of an
// image's size after a header update, as a slow cluster does. The zero value injects
// nothing and counts calls. It is safe for concurrent use; a Backend must not share one Faults
// with another test.
type Faults struct {
	mu       sync.Mutex
	syncErrs []error // returned by the next fdatasync calls, in order
	writeErr error   // returned by the next writeN pwrite calls
	writeN   int
	syncs    int
	writes   int
	stall    chan struct{} // closed by StallSizeReads's release; nil: size reads run
	sizes    int
}

// FailSyncs makes the next len(errs) fdatasync calls fail with errs, in order, without
// calling the kernel (rbd: the next flushes started, with librbd's result replaced); later
// calls reach it again. A kernel reports a writeback error to
// one fdatasync and then succeeds, so FailSyncs(syscall.EIO) is that failure.
func (f *Faults) FailSyncs(errs ...error) {
	f.mu.Lock()
	f.syncErrs = append(f.syncErrs, errs...)
	f.mu.Unlock()
}

// FailWrites makes the next n pwrite calls fail with err without writing (rbd: the next n
// writes started, which do write, with librbd's result replaced).
func (f *Faults) FailWrites(err error, n int) {
	f.mu.Lock()
	f.writeErr, f.writeN = err, n
	f.mu.Unlock()
}

// Syncs returns the number of fdatasync calls made so far, failed ones included.
func (f *Faults) Syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs
}

// Writes returns the number of pwrite calls made so far, failed ones included.
func (f *Faults) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// StallSizeReads makes the rbd backend's reads of an image's size after an update of its
// header (a resize elsewhere) wait, before asking librbd, until release is called: a
// cluster slow to answer them. Calling release more than once does nothing more.
func (f *Faults) StallSizeReads() (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.stall = ch
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if f.stall == ch {
				f.stall = nil
			}
			f.mu.Unlock()
			close(ch)
		})
	}
}

// SizeReads returns the number of size reads (see StallSizeReads) started so far.
func (f *Faults) SizeReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sizes
}

// sizeRead counts a size read and waits while size reads are stalled.
func (f *Faults) sizeRead() {
	f.mu.Lock()
	f.sizes++
	ch := f.stall
	f.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// sync counts an fdatasync and returns the error to inject, if any.
func (f *Faults) sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncs++
	if len(f.syncErrs) == 0 {
		return nil
	}
	err := f.syncErrs[0]
	f.syncErrs = f.syncErrs[1:]
	return err
}

// write counts a pwrite and returns the error to inject, if any.
func (f *Faults) write() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	if f.writeN == 0 {
		return nil
	}
	f.writeN--
	return f.writeErr
}
