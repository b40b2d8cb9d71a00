package target_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
)

// blockStateFile makes the state file's directory fsync wait until the returned release
// runs (at the latest when the test ends); entered receives once per fsync that waits.
func blockStateFile(t *testing.T) (entered <-chan struct{}, release func()) {
	in := make(chan struct{}, 8)
	gate := make(chan struct{})
	restore := target.SetSyncDir(func(d *os.File) error {
		in <- struct{}{}
		<-gate
		return d.Sync()
	})
	release = sync.OnceFunc(func() { close(gate) })
	t.Cleanup(func() {
		release()
		restore()
	})
	return in, release
}

// setPTPL is Set Features Reservation Persistence (83h) turning PTPL on for nsid.
func setPTPL(nsid uint32) nvmeproto.Command {
	cmd := sglCmd(nvmeproto.OpSetFeatures, nsid, 0)
	cmd.CDW10, cmd.CDW11 = uint32(nvmeproto.FIDReservationPersist), nvmeproto.ResvPersistPTPL
	return cmd
}

// submitOffGoroutine submits cmd from another goroutine and returns its completion
// channel, failing the test if Submit itself does not return within d: Submit runs
// Queue.Execute on its caller's goroutine, as a transport's receive loop does.
func submitOffGoroutine(t *testing.T, h *hostQueue, cmd nvmeproto.Command, d time.Duration) <-chan nvmeproto.Completion {
	t.Helper()
	return submitDataOffGoroutine(t, h, cmd, nil, d)
}

// submitDataOffGoroutine is submitOffGoroutine of a command with data as its host memory.
func submitDataOffGoroutine(t *testing.T, h *hostQueue, cmd nvmeproto.Command, data []byte, d time.Duration) <-chan nvmeproto.Completion {
	t.Helper()
	cmd.CID = h.nextCID()
	ch := make(chan nvmeproto.Completion, 1)
	errc := make(chan error, 1)
	go func() { errc <- h.conn.Submit(&cmd, data, func(c nvmeproto.Completion) { ch <- c }) }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
	case <-time.After(d):
		t.Fatalf("Submit of opcode %#x did not return in %v: the command blocked the goroutine that executed it", cmd.Opcode, d)
	}
	return ch
}

// TestAdminCommandBlockedOnStorageRunsOffTransport: an admin command that blocks on
// storage — Set Features Reservation Persistence, in the state file's fsync — does not
// block the goroutine that executed it (a transport's receive loop, serving other queues
// too). Meanwhile the admin queue answers Keep Alive and Abort of a held Asynchronous
// Event Request at once, while a Get Features and a Property Get sent after the blocked
// command complete only after it, in order (the Get Features sees its effect), and I/O
// runs. The old code executed admin commands inline: Submit did not return until the
// fsync did.
func TestAdminCommandBlockedOnStorageRunsOffTransport(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	e := newEnv(t, cfg)
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 0)
	io := e.ioConnect(1, cntlid, 8)
	entered, release := blockStateFile(t)

	set := submitOffGoroutine(t, admin, setPTPL(1), 5*time.Second)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Set Features Reservation Persistence did not reach the state file's fsync")
	}

	ka := nvmeproto.Command{Opcode: nvmeproto.OpKeepAlive, Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(0)}
	expectOK(t, "Keep Alive while an admin command is blocked", admin.do(&ka, nil))
	aerCmd := nvmeproto.Command{Opcode: nvmeproto.OpAsyncEventRequest, Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(0)}
	aer := admin.submit(&aerCmd, nil)
	abort := nvmeproto.Command{Opcode: nvmeproto.OpAbort, Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(0),
		CDW10: uint32(aerCmd.CID) << 16}
	c := admin.do(&abort, nil)
	expectOK(t, "Abort of the AER while an admin command is blocked", c)
	if c.DW0&1 != 0 {
		t.Errorf("Abort DW0 %#x: the held AER was not aborted", c.DW0)
	}
	expectStatus(t, "aborted AER", wait(t, aer), nvmeproto.StatusAbortRequested)

	getCmd := sglCmd(nvmeproto.OpGetFeatures, 1, 0)
	getCmd.CDW10 = uint32(nvmeproto.FIDReservationPersist)
	get := submitOffGoroutine(t, admin, getCmd, 5*time.Second)
	pgCmd := nvmeproto.Command{Flags: nvmeproto.PSDTSGL << 6, SGL: keyed(0)}
	(&nvmeproto.PropertyGetCommand{Offset: nvmeproto.PropCSTS}).ToCommand(&pgCmd)
	pg := submitOffGoroutine(t, admin, pgCmd, 5*time.Second)

	wr := rw(nvmeproto.OpWrite, 1, 0, 8, 4096)
	expectOK(t, "write on the I/O queue while an admin command is blocked", io.do(&wr, make([]byte, 4096)))

	select {
	case c := <-get:
		t.Errorf("Get Features sent after the blocked Set Features completed first (status %v, DW0 %#x)", c.Status, c.DW0)
	case c := <-pg:
		t.Errorf("Property Get sent after the blocked Set Features completed first (status %v)", c.Status)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	expectOK(t, "Set Features Reservation Persistence", wait(t, set))
	c = wait(t, get)
	expectOK(t, "Get Features Reservation Persistence", c)
	if c.DW0 != nvmeproto.ResvPersistPTPL {
		t.Errorf("Get Features Reservation Persistence after the Set: DW0 %#x, want PTPL", c.DW0)
	}
	c = wait(t, pg)
	expectOK(t, "Property Get CSTS", c)
	if !nvmeproto.CSTS(c.DW0).RDY() {
		t.Errorf("CSTS %v, want RDY", nvmeproto.CSTS(c.DW0))
	}
}

// TestAdminQueuedCommandAbortedWhenQueueCloses: an admin command queued behind one
// blocked on storage is not executed once its queue has closed (the host went away): it
// completes with Command Aborted due to SQ Deletion when the blocked one returns.
func TestAdminQueuedCommandAbortedWhenQueueCloses(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20))
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	e := newEnv(t, cfg, target.WithQueueCloseTimeout(time.Minute))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	entered, release := blockStateFile(t)

	set := submitOffGoroutine(t, admin, setPTPL(1), 5*time.Second)
	<-entered
	idCmd := sglCmd(nvmeproto.OpIdentify, 0, nvmeproto.IdentifySize)
	(&nvmeproto.IdentifyCommand{CNS: nvmeproto.CNSController}).ToCommand(&idCmd)
	idCmd.CID = admin.nextCID()
	id := make(chan nvmeproto.Completion, 1)
	if err := admin.conn.Submit(&idCmd, make([]byte, nvmeproto.IdentifySize), func(c nvmeproto.Completion) { id <- c }); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		admin.conn.Close() // waits for both commands
		close(closed)
	}()
	waitFor(t, func() bool { return len(e.tgt.Controllers()) == 0 }) // the queue is closing
	release()
	wait(t, set)
	expectStatus(t, "Identify queued behind the blocked command", wait(t, id), nvmeproto.StatusAbortSQDeletion)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the admin queue's Close did not return")
	}
}

// goid is the calling goroutine's number, from its stack header ("goroutine N [...").
func goid() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// expectInline submits cmd (n bytes of data) on admin, expects it to succeed, and checks
// that its completion ran on the goroutine that executed it (inline) or on another (the
// admin worker), as inline says.
func expectInline(t *testing.T, admin *hostQueue, name string, cmd nvmeproto.Command, n int, inline bool) {
	t.Helper()
	cmd.CID = admin.nextCID()
	ch := make(chan nvmeproto.Completion, 1)
	ran := make(chan string, 1)
	submitter := goid()
	if err := admin.conn.Submit(&cmd, make([]byte, n), func(c nvmeproto.Completion) { ran <- goid(); ch <- c }); err != nil {
		t.Fatalf("%s: Submit: %v", name, err)
	}
	expectOK(t, name, wait(t, ch))
	if g := <-ran; (g == submitter) != inline {
		where := "on the admin worker"
		if inline {
			where = "inline, on the goroutine that executed it"
		}
		t.Errorf("%s completed on goroutine %s, its executor's is %s: want it to run %s", name, g, submitter, where)
	}
}

// TestAdminMemoryCommandsRunInline: an admin command that touches only memory runs
// inline, on the goroutine that executed it (the transport's), when nothing is queued for
// the admin worker — no hand-off to the worker and back per command of a host's connect —
// while those that may wait for storage (Identify Namespace of a thin-provisioned file:
// its usage; Get and Set Features Reservation Persistence: the state file) run on the
// worker; and one
// that runs inline otherwise queues behind a command blocked on the worker, completing
// after it. The old code ran every admin command but Keep Alive, AER, Abort and the
// Fabrics commands on the worker.
func TestAdminMemoryCommandsRunInline(t *testing.T) {
	cfg := baseConfig(memNS(1, 1<<20), fileNS(t, 2, 64<<20)) // 2: a sparse file, thin
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	e := newEnv(t, cfg)
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)

	identify := func(cns nvmeproto.CNS, nsid uint32) nvmeproto.Command {
		cmd := sglCmd(nvmeproto.OpIdentify, nsid, nvmeproto.IdentifySize)
		(&nvmeproto.IdentifyCommand{NSID: nsid, CNS: cns}).ToCommand(&cmd)
		return cmd
	}
	logPage := func(lid nvmeproto.LID, n int) nvmeproto.Command {
		cmd := sglCmd(nvmeproto.OpGetLogPage, 0xFFFFFFFF, n)
		(&nvmeproto.GetLogPageCommand{NSID: 0xFFFFFFFF, LID: lid, NUMD: uint32(n/4 - 1)}).ToCommand(&cmd)
		return cmd
	}
	getFeature := func(fid nvmeproto.FID, nsid uint32) nvmeproto.Command {
		cmd := sglCmd(nvmeproto.OpGetFeatures, nsid, 0)
		(&nvmeproto.GetFeaturesCommand{NSID: nsid, FID: fid}).ToCommand(&cmd)
		return cmd
	}
	aenCfg := sglCmd(nvmeproto.OpSetFeatures, 0, 0)
	(&nvmeproto.SetFeaturesCommand{FID: nvmeproto.FIDAsyncEventConfig, CDW11: 1 << 8}).ToCommand(&aenCfg)

	for _, tc := range []struct {
		name   string
		cmd    nvmeproto.Command
		n      int
		inline bool
	}{
		{"Identify Controller", identify(nvmeproto.CNSController, 0), nvmeproto.IdentifySize, true},
		{"Identify Active Namespace List", identify(nvmeproto.CNSActiveNSList, 0), nvmeproto.IdentifySize, true},
		{"Identify Namespace Descriptor List", identify(nvmeproto.CNSNSDescriptorList, 1), nvmeproto.IdentifySize, true},
		{"Get Log Page SMART", logPage(nvmeproto.LIDSMART, nvmeproto.SMARTLogSize), nvmeproto.SMARTLogSize, true},
		{"Get Log Page ANA", logPage(nvmeproto.LIDANA, 4096), 4096, true},
		{"Get Features Number of Queues", getFeature(nvmeproto.FIDNumberOfQueues, 0), 0, true},
		{"Set Features Asynchronous Event Configuration", aenCfg, 0, true},
		{"Identify Namespace of a memory namespace", identify(nvmeproto.CNSNamespace, 1), nvmeproto.IdentifySize, true},
		{"Identify Namespace of a thin file namespace", identify(nvmeproto.CNSNamespace, 2), nvmeproto.IdentifySize, false},
		{"Get Features Reservation Persistence", getFeature(nvmeproto.FIDReservationPersist, 1), 0, false},
		{"Set Features Reservation Persistence", setPTPL(1), 0, false},
	} {
		expectInline(t, admin, tc.name, tc.cmd, tc.n, tc.inline)
	}

	// Queued behind a command blocked on the worker, an inline one waits its turn.
	entered, release := blockStateFile(t)
	ptplOff := setPTPL(1) // PTPL is on: turning it off writes the state file
	ptplOff.CDW11 = 0
	set := submitOffGoroutine(t, admin, ptplOff, 5*time.Second)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Set Features Reservation Persistence did not reach the state file's fsync")
	}
	id := submitDataOffGoroutine(t, admin, identify(nvmeproto.CNSController, 0), make([]byte, nvmeproto.IdentifySize), 5*time.Second)
	select {
	case c := <-id:
		t.Errorf("Identify Controller sent after the blocked Set Features completed first (status %v)", c.Status)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	expectOK(t, "Set Features Reservation Persistence", wait(t, set))
	expectOK(t, "Identify Controller queued behind it", wait(t, id))
}

// TestAdminIdentifyFindingThinNamespaceInlineGoesToWorker: an Identify Namespace run
// inline that finds a namespace whose backend it would ask for its usage — the NSID's
// namespace replaced by a thin file's between execAdmin's look and Identify's, forced
// here by letting every command through inline — goes to the admin worker instead of
// asking on the transport's goroutine; one of a memory namespace completes inline. On the
// old code Identify asked the file's usage inline.
func TestAdminIdentifyFindingThinNamespaceInlineGoesToWorker(t *testing.T) {
	defer target.SetInlineAllAdmin()()
	e := newEnv(t, baseConfig(memNS(1, 1<<20), fileNS(t, 2, 64<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	for _, tc := range []struct {
		nsid   uint32
		inline bool
	}{{1, true}, {2, false}} {
		cmd := sglCmd(nvmeproto.OpIdentify, tc.nsid, nvmeproto.IdentifySize)
		(&nvmeproto.IdentifyCommand{NSID: tc.nsid, CNS: nvmeproto.CNSNamespace}).ToCommand(&cmd)
		expectInline(t, admin, fmt.Sprintf("Identify Namespace %d", tc.nsid), cmd, nvmeproto.IdentifySize, tc.inline)
	}
}
