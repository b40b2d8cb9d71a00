package initiator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// loopTransport connects queues through an in-process target (target/loop), with no
// network and no memory registration: host memory is addressed by offset into the
// region a command's buffer lives in.
type loopTransport struct {
	dial LoopDialer
}

func (t *loopTransport) newRegion(n int) (*region, error) { return goRegion(n), nil }

func (t *loopTransport) close() error { return nil }

func (t *loopTransport) openQueue(_ context.Context, q *queue, _ uint16) (int, error) {
	conn, err := t.dial(q.depth)
	if err != nil {
		return 0, err
	}
	lq := &loopQueue{q: q, conn: conn, wakeCh: make(chan struct{}, 1),
		ring: make([]loopCompletion, 0, q.depth), spare: make([]loopCompletion, 0, q.depth),
		posted: make([]atomic.Bool, q.depth), held: make([]*Buffer, q.depth)}
	q.ctl = goRegion(ctlSize(q.depth))
	for i := range q.slots {
		i := uint16(i)
		q.slots[i].x = func(cqe nvmeproto.Completion) { lq.push(i, cqe) }
	}
	q.tr = lq
	return q.depth, nil
}

type loopCompletion struct {
	idx uint16
	cqe nvmeproto.Completion
}

// loopQueue is one loop Conn. Completions arrive on whatever goroutine the target
// finishes a command on (often inline in Submit); push queues them and run delivers them
// on the queue's completion goroutine, so Done functions never run inside Submit.
//
// The target addresses the command's buffer directly, for as long as it holds the
// command: posted tells which slots' commands it holds. When run gives up waiting for
// the target (loopCloseWait) it aborts those commands, but keeps a reference to each one's
// buffer in held until the target's late completion drops it: the memory is not freed or
// reused by the pool while the target may still write into it.
type loopQueue struct {
	q        *queue
	conn     LoopConn
	mu       sync.Mutex
	ring     []loopCompletion
	spare    []loopCompletion
	sleeping atomic.Bool
	wakeCh   chan struct{}
	posted   []atomic.Bool // by slot: Submit accepted the command and done has not been called
	gone     bool          // under mu: run gave up on the target; completions from now on are late
	held     []*Buffer     // under mu, by slot: the buffer of a command the target held when run gave up
}

func (t *loopQueue) events() int32 { return 1 }

func (t *loopQueue) post(s *slot) error {
	var data []byte
	switch {
	case s.icd:
		data = s.buf.Bytes()
	case s.reg != nil:
		data = s.reg.mem
	}
	t.posted[s.idx].Store(true)
	if err := t.conn.Submit(&s.cmd, data, s.x.(func(nvmeproto.Completion))); err != nil {
		t.posted[s.idx].Store(false)
		return err
	}
	return nil
}

func (t *loopQueue) push(idx uint16, cqe nvmeproto.Completion) {
	t.mu.Lock()
	t.posted[idx].Store(false)
	if t.gone {
		b := t.held[idx]
		t.held[idx] = nil
		t.mu.Unlock()
		if b != nil {
			b.unref()
		}
		return
	}
	t.ring = append(t.ring, loopCompletion{idx, cqe})
	t.mu.Unlock()
	if t.sleeping.Load() {
		t.wake()
	}
}

func (t *loopQueue) wake() {
	select {
	case t.wakeCh <- struct{}{}:
	default:
	}
}

// take swaps out the completions queued so far.
func (t *loopQueue) take() []loopCompletion {
	t.mu.Lock()
	b := t.ring
	t.ring = t.spare[:0]
	t.mu.Unlock()
	t.spare = b
	return b
}

func (t *loopQueue) deliver(b []loopCompletion) {
	q := t.q
	for i := range b {
		s, err := q.response(&b[i].cqe)
		if err != nil {
			q.fail(err)
			continue
		}
		if s.event() {
			q.finish(s, nil)
		}
	}
}

func (t *loopQueue) run() {
	q := t.q
	connDone := t.conn.Done()
	for {
		q.runAuthEnds()
		if b := t.take(); len(b) > 0 {
			t.deliver(b)
			continue
		}
		if q.dead.Load() {
			break
		}
		t.sleeping.Store(true)
		t.mu.Lock()
		n := len(t.ring)
		t.mu.Unlock()
		if n == 0 {
			select {
			case <-t.wakeCh:
			case <-connDone:
				err := t.conn.Err()
				q.fail(fmt.Errorf("%w: loop queue %d: %v", ErrDisconnected, q.qid, err))
				connDone = nil
			case <-q.deadCh:
			}
		}
		t.sleeping.Store(false)
	}
	// Dead: no new posts once quiesced. Close waits until the target has called done for
	// every command it accepted; a backend stuck in I/O could hold it forever, so wait a
	// bounded time, delivering what completes meanwhile, then abort the rest.
	q.quiesce()
	closed := make(chan struct{})
	go func() {
		t.conn.Close()
		close(closed)
	}()
	t.sleeping.Store(true)
	timer := time.NewTimer(loopCloseWait)
	defer timer.Stop()
	for {
		select {
		case <-t.wakeCh:
			t.deliver(t.take())
			continue
		case <-closed:
		case <-timer.C:
		}
		break
	}
	t.mu.Lock()
	t.gone = true
	rest := t.ring
	t.ring = nil
	for i := range q.slots {
		if b := q.slots[i].buf; b != nil && t.posted[i].Load() {
			b.ref()
			t.held[i] = b
		}
	}
	t.mu.Unlock()
	t.deliver(rest)
	q.abortAll()
}

// loopCloseWait bounds how long a dead loop queue waits for the target to finish the
// commands it accepted (then it aborts them, see loopQueue).
const loopCloseWait = 3 * time.Second

func (t *loopQueue) close() error { return nil }
