package target

import "sync"

// workQueue runs the requests pushed on it one at a time, in the order they were pushed,
// on a goroutine of its own that exists while requests are queued (and while it runs the
// last one it took): a controller's admin worker, a queue's authentication worker. The
// goroutine calls run for each request; run completes it. Safe for concurrent use; run
// is set before the first push and not changed.
type workQueue struct {
	run func(*Request)

	mu      sync.Mutex
	reqs    []*Request
	running bool // the goroutine runs
}

// push queues r, starting the goroutine unless it runs.
func (w *workQueue) push(r *Request) {
	w.mu.Lock()
	w.pushLocked(r)
}

// pushUnlessIdle queues r as push does while the goroutine runs, and reports whether it
// did: when it does not run, nothing is queued, and the caller runs r itself (nothing
// queued before r can be overtaken).
func (w *workQueue) pushUnlessIdle(r *Request) bool {
	w.mu.Lock()
	if !w.running {
		w.mu.Unlock()
		return false
	}
	w.pushLocked(r)
	return true
}

// pushLocked queues r and unlocks w.mu.
func (w *workQueue) pushLocked(r *Request) {
	w.reqs = append(w.reqs, r)
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		go w.drain()
	}
}

// drain runs the queued requests in order and returns when none is left.
func (w *workQueue) drain() {
	for {
		w.mu.Lock()
		if len(w.reqs) == 0 {
			w.running = false
			w.reqs = w.reqs[:0]
			w.mu.Unlock()
			return
		}
		r := w.reqs[0]
		w.reqs[0] = nil
		w.reqs = w.reqs[1:]
		w.mu.Unlock()
		w.run(r)
	}
}
