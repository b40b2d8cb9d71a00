package target_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// fencing opens the target's backends (backend.Open), wrapped so that a test can fence the
// one last opened, as a Ceph cluster fences an rbd image by blocklisting its RADOS client:
// its requests fail with an error wrapping backend.ErrNeedsReopen (and backend.ErrSync
// when writes reported complete were lost), and with report it says so through
// Spec.OnNeedsReopen. It can make the next opens fail, as a cluster refusing them does.
type fencing struct {
	mu      sync.Mutex
	opens   []time.Time // every open tried, failed ones included
	failing int         // opens still to fail
	fenceAt int         // the open (1 first) whose backend is fenced, and reports it, before it returns
	cur     *fenceable
}

type fenceable struct {
	backend.Backend
	report func(error)
	err    atomic.Pointer[error]
}

func (f *fencing) open(s backend.Spec) (backend.Backend, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens = append(f.opens, time.Now())
	if f.failing > 0 {
		f.failing--
		return nil, fmt.Errorf("test: the cluster refuses the open: %w", syscall.ECONNREFUSED)
	}
	b, err := backend.Open(s)
	if err != nil {
		return nil, err
	}
	f.cur = &fenceable{Backend: b, report: s.OnNeedsReopen}
	if len(f.opens) == f.fenceAt {
		f.cur.fence(false, true)
	}
	return f.cur, nil
}

// fence fences the backend last opened.
func (f *fencing) fence(lost, report bool) {
	f.mu.Lock()
	b := f.cur
	f.mu.Unlock()
	b.fence(lost, report)
}

func (b *fenceable) fence(lost, report bool) {
	err := fmt.Errorf("test: fenced: %w: %w", backend.ErrNeedsReopen, syscall.ESHUTDOWN)
	if lost {
		err = fmt.Errorf("test: fenced with writes not flushed: %w: %w: %w", backend.ErrSync, backend.ErrNeedsReopen, syscall.ESHUTDOWN)
	}
	b.err.Store(&err)
	if report && b.report != nil {
		b.report(err)
	}
}

func (f *fencing) failOpens(n int) {
	f.mu.Lock()
	f.failing = n
	f.mu.Unlock()
}

func (f *fencing) openTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.opens...)
}

// waitOpens waits until n opens have been tried.
func (f *fencing) waitOpens(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(f.openTimes()) < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d backend opens within 10 s, want %d", len(f.openTimes()), n)
		}
	}
}

func (b *fenceable) fenced() error {
	if p := b.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (b *fenceable) ReadBlocks(buf []byte, slba uint64) error {
	if err := b.fenced(); err != nil {
		return err
	}
	return b.Backend.ReadBlocks(buf, slba)
}

func (b *fenceable) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	if err := b.fenced(); err != nil {
		return err
	}
	return b.Backend.WriteBlocks(buf, slba, fua)
}

func (b *fenceable) Flush() error {
	if err := b.fenced(); err != nil {
		return err
	}
	return b.Backend.Flush()
}

func (b *fenceable) WriteZeroes(slba, nlb uint64) error {
	if err := b.fenced(); err != nil {
		return err
	}
	return b.Backend.WriteZeroes(slba, nlb)
}

func (b *fenceable) Deallocate(slba, nlb uint64) error {
	if err := b.fenced(); err != nil {
		return err
	}
	return b.Backend.Deallocate(slba, nlb)
}

func (b *fenceable) Info() backend.Info { return backend.Describe(b.Backend) }

// fastReopen is an auto_reopen policy for tests: short waits, a settle time longer than
// any test.
var fastReopen = conf.AutoReopen{Attempts: 3, Backoff: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Settle: time.Hour}

// reopenConfig is baseConfig with the auto_reopen policy p.
func reopenConfig(p conf.AutoReopen, nss ...conf.Namespace) *conf.Config {
	c := baseConfig(nss...)
	c.AutoReopen = p
	return c
}

// until retries cmd until it succeeds, for at most 10 s, and returns the statuses it got
// before.
func until(t *testing.T, what string, q *hostQueue, cmd nvmeproto.Command, data []byte) []nvmeproto.Status {
	t.Helper()
	var seen []nvmeproto.Status
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c := q.do(&cmd, data)
		if c.Status.Success() {
			return seen
		}
		seen = append(seen, c.Status)
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing 10 s on (%v), after %v", what, c.Status, seen)
		}
	}
}

// TestAutoReopenAfterFence: a namespace whose backend fails a command with
// ErrNeedsReopen (its storage fenced it) is reopened by the target itself: that command
// and those arriving during the reopen get Namespace Not Ready without DNR (CRD 1 once
// the host enabled ACRE), and the host's retries succeed on the new backend, which holds
// what was written before, without ReopenNamespace. A second fence, soon after, is
// recovered from after the backoff.
func TestAutoReopenAfterFence(t *testing.T) {
	f := &fencing{}
	e := newEnv(t, reopenConfig(fastReopen, fileNS(t, 1, 1<<20)), target.WithBackendOpener(f.open))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	a := pattern(4096, 1)
	wa := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write before the fence", q.do(&wa, a))

	f.fence(false, false)
	b := pattern(4096, 2)
	wb := rw(nvmeproto.OpWrite, 1, 8, 8, 4096)
	expectRetryable(t, "write meeting the fence", q.do(&wb, b), nvmeproto.StatusNSNotReady, 0)
	for _, st := range until(t, "write after the fence", q, wb, b) {
		if st.Code() != nvmeproto.StatusNSNotReady.Code() || st.DNR() {
			t.Errorf("a write during the reopen got %v, want Namespace Not Ready without DNR", st)
		}
	}
	if n := len(f.openTimes()); n != 2 {
		t.Errorf("%d backend opens, want 2: the namespace's and one reopen", n)
	}
	got := make([]byte, 4096)
	r := rw(nvmeproto.OpRead, 1, 0, 16, 8192)
	both := make([]byte, 8192)
	expectOK(t, "read after the reopen", q.do(&r, both))
	if !bytes.Equal(both[:4096], a) || !bytes.Equal(both[4096:], b) {
		t.Error("the data written before the fence and the retried write are not both there")
	}
	if fns := e.tgt.FailedNamespaces(); len(fns) != 0 {
		t.Errorf("FailedNamespaces = %+v, want none: nothing reported complete was lost", fns)
	}

	// Fenced again right away: the reopen waits for the backoff first.
	expectOK(t, "enable ACRE", admin.setFeature(fidHostBehavior, 0, hostBehavior(nvmeproto.HostBehavior{ACRE: 1})))
	f.fence(false, false)
	fenced := time.Now()
	rr := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	expectRetryable(t, "read meeting the second fence, ACRE enabled", q.do(&rr, got), nvmeproto.StatusNSNotReady, 1)
	until(t, "read after the second fence", q, rr, got)
	opens := f.openTimes()
	if len(opens) != 3 {
		t.Fatalf("%d backend opens, want 3", len(opens))
	}
	if d := opens[2].Sub(fenced); d < 100*time.Millisecond {
		t.Errorf("reopened %s after a second fence within the settle time, want the backoff (100 ms) first", d)
	}
	if !bytes.Equal(got, a) {
		t.Error("read after the second reopen: not the data written")
	}
}

// TestAutoReopenOnReport: a backend that reports the fence itself (Spec.OnNeedsReopen:
// an rbd image learns it from another image's request or its watch) is reopened with no
// command of its own meeting it.
func TestAutoReopenOnReport(t *testing.T) {
	f := &fencing{}
	e := newEnv(t, reopenConfig(fastReopen, fileNS(t, 1, 1<<20)), target.WithBackendOpener(f.open))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	f.fence(false, true)
	f.waitOpens(t, 2)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	until(t, "write after the reported fence", q, w, pattern(4096, 3))
	if n := len(f.openTimes()); n != 2 {
		t.Errorf("%d backend opens, want 2", n)
	}
}

// TestAutoReopenReportedDuringOpen: a backend fenced while the namespace is being added
// (it reports before the namespace is in its subsystem's table) is reopened once the
// namespace is there, with no command meeting it.
func TestAutoReopenReportedDuringOpen(t *testing.T) {
	f := &fencing{fenceAt: 1}
	e := newEnv(t, reopenConfig(fastReopen, fileNS(t, 1, 1<<20)), target.WithBackendOpener(f.open))
	f.waitOpens(t, 2)
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	until(t, "write after the reopen", q, w, pattern(4096, 6))
	if n := len(f.openTimes()); n != 2 {
		t.Errorf("%d backend opens, want 2", n)
	}
}

// TestAutoReopenKeepsFailure: a fence that may have lost writes reported complete
// (ErrSync with ErrNeedsReopen) fails the namespace, and the automatic reopen keeps the
// failure: reads are served again, writes and flushes get Write Fault with DNR, until an
// operator reopens it.
func TestAutoReopenKeepsFailure(t *testing.T) {
	for _, report := range []bool{false, true} {
		t.Run(fmt.Sprintf("report=%v", report), func(t *testing.T) {
			f := &fencing{}
			e := newEnv(t, reopenConfig(fastReopen, fileNS(t, 1, 1<<20)), target.WithBackendOpener(f.open))
			_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
			q := e.ioConnect(1, cntlid, 8)
			data := pattern(4096, 4)
			w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
			expectOK(t, "write before the fence", q.do(&w, data))
			f.fence(true, report)
			if !report {
				expectDNR(t, "write meeting a fence that lost writes", q.do(&w, data), nvmeproto.StatusWriteFault)
			}
			f.waitOpens(t, 2)
			got := make([]byte, 4096)
			r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
			until(t, "read after the reopen", q, r, got)
			if !bytes.Equal(got, data) {
				t.Error("read after the reopen: not the data written")
			}
			expectDNR(t, "write after the automatic reopen", q.do(&w, data), nvmeproto.StatusWriteFault)
			fl := sglCmd(nvmeproto.OpFlush, 1, 0)
			expectDNR(t, "flush after the automatic reopen", q.do(&fl, nil), nvmeproto.StatusWriteFault)
			if fns := e.tgt.FailedNamespaces(); len(fns) != 1 || !errors.Is(fns[0].Reason, backend.ErrSync) {
				t.Fatalf("FailedNamespaces = %+v, want namespace 1 failed with ErrSync", fns)
			}
			if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
				t.Fatal(err)
			}
			expectOK(t, "write after the operator's reopen", q.do(&w, data))
			expectOK(t, "flush after the operator's reopen", q.do(&fl, nil))
		})
	}
}

// TestAutoReopenGivesUp: when the backend cannot be opened again (the cluster refuses),
// the target tries Attempts times, waiting Backoff and then twice as long in between,
// then leaves the namespace inactive (Invalid Namespace with DNR) and opens nothing more
// until an operator reopens it. Namespace Not Ready is answered until then.
func TestAutoReopenGivesUp(t *testing.T) {
	f := &fencing{}
	e := newEnv(t, reopenConfig(fastReopen, fileNS(t, 1, 1<<20)), target.WithBackendOpener(f.open))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	data := pattern(4096, 5)
	w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write before the fence", q.do(&w, data))
	f.failOpens(100)
	f.fence(false, false)
	expectRetryable(t, "write meeting the fence", q.do(&w, data), nvmeproto.StatusNSNotReady, 0)
	f.waitOpens(t, 2)
	expectRetryable(t, "write while the reopen is retried", q.do(&w, data), nvmeproto.StatusNSNotReady, 0)
	f.waitOpens(t, 4)
	r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	got := make([]byte, 4096)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c := q.do(&r, got)
		if c.Status.Code() == nvmeproto.StatusInvalidNamespace.Code() {
			expectDNR(t, "read after the reopen gave up", c, nvmeproto.StatusInvalidNamespace)
			break
		}
		expectRetryable(t, "read before the reopen gives up", c, nvmeproto.StatusNSNotReady, 0)
		if time.Now().After(deadline) {
			t.Fatal("the namespace is not inactive 5 s after the last open")
		}
	}
	time.Sleep(500 * time.Millisecond) // more than the longest backoff
	opens := f.openTimes()
	if len(opens) != 4 {
		t.Fatalf("%d backend opens, want 4: the namespace's and 3 attempts", len(opens))
	}
	if d := opens[2].Sub(opens[1]); d < 100*time.Millisecond {
		t.Errorf("second attempt %s after the first, want the backoff (100 ms)", d)
	}
	if d := opens[3].Sub(opens[2]); d < 200*time.Millisecond {
		t.Errorf("third attempt %s after the second, want the doubled backoff (200 ms)", d)
	}
	f.failOpens(0)
	if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
		t.Fatal(err)
	}
	expectOK(t, "read after the operator's reopen", q.do(&r, got))
	if !bytes.Equal(got, data) {
		t.Error("read after the operator's reopen: not the data written")
	}
}

// TestAutoReopenFlapping: a namespace fenced again each time it comes back, within the
// settle time, backs off and gives up after Attempts reopens in a row instead of
// reopening as fast as it is fenced.
func TestAutoReopenFlapping(t *testing.T) {
	f := &fencing{}
	e := newEnv(t, reopenConfig(fastReopen, fileNS(t, 1, 1<<20)), target.WithBackendOpener(f.open))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	got := make([]byte, 4096)
	for i := 1; i <= 3; i++ {
		f.fence(false, true)
		f.waitOpens(t, i+1)
		until(t, fmt.Sprintf("read after fence %d", i), q, r, got)
	}
	f.fence(false, true)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c := q.do(&r, got); c.Status.Code() == nvmeproto.StatusInvalidNamespace.Code() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the namespace fenced a fourth time is not inactive after 5 s")
		}
	}
	opens := f.openTimes()
	if len(opens) != 4 {
		t.Errorf("%d backend opens, want 4: the namespace's and 3 reopens", len(opens))
	}
	for i := 2; i < len(opens); i++ {
		if d := opens[i].Sub(opens[i-1]); d < 100*time.Millisecond {
			t.Errorf("reopen %d came %s after the one before, want at least the backoff", i, d)
		}
	}
}

// TestAutoReopenStopsAtClose: Close does not wait out the backoff of an automatic
// reopen whose opens fail.
func TestAutoReopenStopsAtClose(t *testing.T) {
	f := &fencing{}
	e := newEnv(t, reopenConfig(conf.AutoReopen{Backoff: time.Minute}, fileNS(t, 1, 1<<20)), target.WithBackendOpener(f.open))
	f.failOpens(100)
	f.fence(false, true)
	f.waitOpens(t, 2)
	start := time.Now()
	if err := e.tgt.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %s during an automatic reopen's backoff of a minute", d)
	}
}

// TestAutoReopenPolicyChangesLive: SetAutoReopen changes the running configuration's
// auto_reopen, validated as a file's would be, and a reopen under way follows the new
// policy from its next open: raising attempts while a namespace's opens keep failing lets
// it try that many before it gives up.
func TestAutoReopenPolicyChangesLive(t *testing.T) {
	f := &fencing{}
	slow := conf.AutoReopen{Attempts: 2, Backoff: 500 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Settle: time.Hour}
	e := newEnv(t, reopenConfig(slow, fileNS(t, 1, 1<<20)), target.WithBackendOpener(f.open))
	if err := e.tgt.SetAutoReopen(conf.AutoReopen{Attempts: 1000}); err == nil ||
		!strings.Contains(err.Error(), "auto_reopen.attempts: 1000 is out of range; use 1..100") {
		t.Errorf("SetAutoReopen with 1000 attempts: %v; want the field, the range and the fix", err)
	}
	f.failOpens(100)
	f.fence(false, true)
	f.waitOpens(t, 2) // the first attempt failed; the second waits 500 ms
	more := conf.AutoReopen{Attempts: 4, Backoff: 100 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Settle: time.Hour}
	if err := e.tgt.SetAutoReopen(more); err != nil {
		t.Fatal(err)
	}
	if got := e.tgt.Config().AutoReopen; got != more {
		t.Errorf("the running configuration's auto_reopen %+v, want %+v", got, more)
	}
	f.waitOpens(t, 5) // the namespace's and 4 attempts
	time.Sleep(time.Second)
	if n := len(f.openTimes()); n != 5 {
		t.Errorf("%d backend opens, want 5: the namespace's and the 4 attempts of the new policy", n)
	}
}

// closeSpy is a backend that records its Close.
type closeSpy struct {
	backend.Backend
	closed atomic.Bool
}

func (b *closeSpy) Close() error {
	b.closed.Store(true)
	return b.Backend.Close()
}

func (b *closeSpy) Info() backend.Info { return backend.Describe(b.Backend) }

// heldFencing is fencing whose third open (the first reopen, after the namespaces'
// opens) signals opening and waits for release before it opens, and records the backend
// it returns (held) and the Spec of every open.
type heldFencing struct {
	fencing
	opening, release chan struct{}
	mu               sync.Mutex
	n                int
	specs            []backend.Spec
	held             *closeSpy
}

func newHeldFencing() *heldFencing {
	return &heldFencing{opening: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldFencing) open(s backend.Spec) (backend.Backend, error) {
	h.mu.Lock()
	h.n++
	n := h.n
	h.specs = append(h.specs, s)
	h.mu.Unlock()
	if n == 3 {
		close(h.opening)
		<-h.release
	}
	b, err := h.fencing.open(s)
	if err != nil || n != 3 {
		return b, err
	}
	spy := &closeSpy{Backend: b}
	h.mu.Lock()
	h.held = spy
	h.mu.Unlock()
	return spy, nil
}

// opened returns the Specs of the opens so far.
func (h *heldFencing) opened() []backend.Spec {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.specs)
}

// quickly runs call and fails the test unless it returns within 2 s.
func quickly(t *testing.T, what string, call func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("%s did not return within 2 s of an automatic reopen's backend open: it waits for the open", what)
	}
}

// TestAutoReopenOpensWithoutConfigLock: an automatic reopen's backend open, which can
// take minutes for an rbd image, does not hold up the configuration: control calls made
// meanwhile return at once. What they change is seen before the opened backend is put in
// place: a namespace removed meanwhile stays removed and the backend opened for it is
// closed unused; one whose configuration changed meanwhile (write protection) is opened
// again from the new configuration and the first backend closed. The old code held the
// configuration lock across the open: those calls waited for it.
func TestAutoReopenOpensWithoutConfigLock(t *testing.T) {
	for _, c := range []string{"removed", "changed"} {
		t.Run(c, func(t *testing.T) {
			h := newHeldFencing()
			// Namespace 1 opens last: fencing fences the backend last opened.
			e := newEnv(t, reopenConfig(fastReopen, memNS(2, 1<<20), fileNS(t, 1, 1<<20)), target.WithBackendOpener(h.open))
			_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
			q := e.ioConnect(1, cntlid, 8)
			t.Cleanup(func() {
				select {
				case <-h.release:
				default:
					close(h.release)
				}
			})
			h.fence(false, true)
			select {
			case <-h.opening:
			case <-time.After(10 * time.Second):
				t.Fatal("no automatic reopen within 10 s of the fence")
			}
			quickly(t, "write-protecting another namespace", func() error { return e.tgt.SetNamespaceReadOnly(subNQN, 2, true) })
			switch c {
			case "removed":
				quickly(t, "removing the namespace being reopened", func() error { return e.tgt.RemoveNamespace(subNQN, 1) })
			case "changed":
				quickly(t, "write-protecting the namespace being reopened", func() error { return e.tgt.SetNamespaceReadOnly(subNQN, 1, true) })
			}
			close(h.release)
			waitFor(t, func() bool {
				h.mu.Lock()
				defer h.mu.Unlock()
				return h.held != nil && h.held.closed.Load()
			})
			w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
			switch c {
			case "removed":
				expectDNR(t, "a write to the removed namespace", q.do(&w, pattern(4096, 1)), nvmeproto.StatusInvalidNamespace)
				time.Sleep(300 * time.Millisecond) // longer than any backoff of fastReopen
				if n := len(h.opened()); n != 3 {  // the two namespaces' and the discarded reopen's
					t.Errorf("%d backend opens, want 3: nothing opened after the discarded reopen", n)
				}
				if ns := e.tgt.Namespaces(); len(ns) != 1 || ns[0].NSID != 2 {
					t.Errorf("namespaces %+v, want namespace 2 only", ns)
				}
			case "changed":
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					st := q.do(&w, pattern(4096, 1)).Status
					if st.Code() == nvmeproto.StatusNSWriteProtected.Code() {
						break
					}
					if st.Code() != nvmeproto.StatusNSNotReady.Code() || time.Now().After(deadline) {
						t.Fatalf("a write after the reopen: %v, want Namespace Not Ready until Namespace is Write Protected", st)
					}
				}
				// Both reopens open the file for writing: the write protection came while
				// the namespace ran (see TestReopenKeepsBackendWritable).
				specs := h.opened()
				var ro []bool
				for _, sp := range specs {
					ro = append(ro, sp.ReadOnly)
				}
				if len(specs) != 4 || specs[2].ReadOnly || specs[3].ReadOnly {
					t.Errorf("%d opens, read-only %v: want the namespaces', the discarded reopen, and another, both writable", len(specs), ro)
				}
			}
		})
	}
}

// TestReopenKeepsBackendWritable: a namespace write-protected while it runs keeps a
// backend open for writing through a reopen, an operator's or an automatic one: hosts
// still see it write-protected, and the protection can be lifted afterwards, as before
// the reopen. The old code reopened it from the configuration's read_only: the file was
// opened read-only, and lifting the protection failed ("its backend was opened
// read-only") until the namespace was removed and added again.
func TestReopenKeepsBackendWritable(t *testing.T) {
	for _, how := range []string{"operator", "automatic"} {
		t.Run(how, func(t *testing.T) {
			f := &fencing{}
			e := newEnv(t, reopenConfig(fastReopen, fileNS(t, 1, 1<<20)), target.WithBackendOpener(f.open))
			_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
			q := e.ioConnect(1, cntlid, 8)
			if err := e.tgt.SetNamespaceReadOnly(subNQN, 1, true); err != nil {
				t.Fatal(err)
			}
			w := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
			data := pattern(4096, 8)
			switch how {
			case "operator":
				if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
					t.Fatal(err)
				}
			case "automatic":
				f.fence(false, true)
				f.waitOpens(t, 2)
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				st := q.do(&w, data).Status
				if st.Code() == nvmeproto.StatusNSWriteProtected.Code() {
					break
				}
				if st.Code() != nvmeproto.StatusNSNotReady.Code() || time.Now().After(deadline) {
					t.Fatalf("a write after the reopen: %v, want Namespace is Write Protected", st)
				}
			}
			if err := e.tgt.SetNamespaceReadOnly(subNQN, 1, false); err != nil {
				t.Fatalf("lifting write protection after the reopen: %v", err)
			}
			expectOK(t, "write once write protection is lifted", q.do(&w, data))
		})
	}
}

// TestReopenTakesOverAutoReopen: an operator's reopen (ReopenNamespace, or new open
// settings) of a namespace whose automatic reopen is under way takes it over: if the
// operator's fails, the namespace is inactive (Invalid Namespace with DNR), as its error
// says, and stays so — the automatic reopen, whether it was opening the backend or
// waiting out a backoff, installs nothing and opens nothing more; the backend it opened
// is closed unused — until the operator reopens it again. The old code let the
// automatic reopen go on: once its open succeeded it put the namespace back, so that
// hosts, which had removed the block device on Invalid Namespace, saw a new one appear.
func TestReopenTakesOverAutoReopen(t *testing.T) {
	for _, c := range []struct{ name, during string }{
		{"reopen during the open", "open"},
		{"reopen during the backoff", "backoff"},
		{"open settings during the open", "open"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHeldFencing()
			p := conf.AutoReopen{Attempts: 3, Backoff: 300 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, Settle: time.Hour}
			// Namespace 1 opens last: fencing fences the backend last opened.
			e := newEnv(t, reopenConfig(p, memNS(2, 1<<20), fileNS(t, 1, 1<<20)), target.WithBackendOpener(h.open))
			_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
			q := e.ioConnect(1, cntlid, 8)
			t.Cleanup(func() {
				select {
				case <-h.release:
				default:
					close(h.release)
				}
			})
			if c.during == "backoff" {
				close(h.release) // the automatic reopen's first open is not held, but fails
				h.failOpens(1)
			}
			h.fence(false, true)
			select {
			case <-h.opening:
			case <-time.After(10 * time.Second):
				t.Fatal("no automatic reopen within 10 s of the fence")
			}
			if c.during == "backoff" {
				h.waitOpens(t, 3) // the namespaces' and the failed first attempt
			}
			h.failOpens(100) // the operator's opens fail
			var err error
			if strings.HasPrefix(c.name, "open settings") {
				err = e.tgt.SetNamespaceOpenSettings(subNQN, 1, target.OpenSettings{Shared: true})
			} else {
				err = e.tgt.ReopenNamespace(subNQN, 1)
			}
			if err == nil || !strings.Contains(err.Error(), "inactive") {
				t.Fatalf("the operator's reopen with its opens failing: %v; want it to say the namespace stays inactive", err)
			}
			r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
			expectDNR(t, "read after the operator's reopen failed", q.do(&r, make([]byte, 4096)), nvmeproto.StatusInvalidNamespace)
			opens := len(h.opened())
			h.failOpens(0) // the automatic reopen's next open would succeed
			if c.during == "open" {
				close(h.release)
				discarded := func() bool {
					h.mu.Lock()
					defer h.mu.Unlock()
					return h.held != nil && h.held.closed.Load()
				}
				for deadline := time.Now().Add(5 * time.Second); !discarded(); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Error("the backend the automatic reopen opened is not closed 5 s after its open returned")
						break
					}
				}
			}
			time.Sleep(700 * time.Millisecond) // more than two backoffs
			if n := len(h.opened()); n != opens {
				t.Errorf("%d backend opens after the operator's reopen failed, want none", n-opens)
			}
			expectDNR(t, "read once the automatic reopen could have ended", q.do(&r, make([]byte, 4096)), nvmeproto.StatusInvalidNamespace)
			if err := e.tgt.ReopenNamespace(subNQN, 1); err != nil {
				t.Fatal(err)
			}
			expectOK(t, "read after the operator's second reopen", q.do(&r, make([]byte, 4096)))
		})
	}
}

// logBuffer collects a Target's log (slog text) for a test to search.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// line returns the first line of the log that contains s, or "".
func (b *logBuffer) line(s string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range strings.Lines(b.buf.String()) {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// count returns how many lines of the log contain s.
func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for l := range strings.Lines(b.buf.String()) {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// TestAutoReopenGivesUpForLoweredAttempts: an automatic reopen that gives up because
// auto_reopen.attempts was lowered while it ran says so, and what its last open came
// to: here an open that succeeded but was discarded because the namespace's
// configuration changed meanwhile, after one that failed. The old code broke out of its
// loop with that open's nil error and logged that the backend "asked to be reopened
// again within 1h0m0s of each of 1 reopens", which never happened.
func TestAutoReopenGivesUpForLoweredAttempts(t *testing.T) {
	h := newHeldFencing()
	logs := &logBuffer{}
	p := conf.AutoReopen{Attempts: 3, Backoff: 100 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Settle: time.Hour}
	// Opens: the namespace's, the first attempt (fails), the second (held, then discarded).
	e := newEnv(t, reopenConfig(p, fileNS(t, 1, 1<<20)), target.WithBackendOpener(h.open),
		target.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	_, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	q := e.ioConnect(1, cntlid, 8)
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	})
	h.failOpens(1)
	h.fence(false, true)
	select {
	case <-h.opening:
	case <-time.After(10 * time.Second):
		t.Fatal("no second attempt within 10 s of the fence")
	}
	if err := e.tgt.SetNamespaceReadOnly(subNQN, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := e.tgt.SetAutoReopen(conf.AutoReopen{Attempts: 1, Backoff: p.Backoff, MaxBackoff: p.MaxBackoff, Settle: p.Settle}); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	r := rw(nvmeproto.OpRead, 1, 0, 8, 4096)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c := q.do(&r, make([]byte, 4096))
		if c.Status.Code() == nvmeproto.StatusInvalidNamespace.Code() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the namespace is not inactive 10 s after its reopen was left no attempts: %v", c.Status)
		}
	}
	l := logs.line("reopening namespace failed: it stays inactive")
	if l == "" {
		t.Fatal("no log line says the automatic reopen gave up")
	}
	if strings.Contains(l, "asked to be reopened again") ||
		!strings.Contains(l, "auto_reopen.attempts was lowered to 1") || !strings.Contains(l, "configuration changed") {
		t.Errorf("the give-up log line:\n%s\nwant it to say auto_reopen.attempts was lowered to 1 and the last open was discarded for a configuration change", l)
	}
	if n := len(h.opened()); n != 3 {
		t.Errorf("%d backend opens, want 3: the namespace's and the reopen's two", n)
	}
}
