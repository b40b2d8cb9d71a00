package target_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// TestStress runs I/O from several goroutines on several queues while namespaces come
// and go, AERs are completed, and finally the controller is reset under load. Every
// accepted command must complete exactly once; -race checks the rest.
func TestStress(t *testing.T) {
	e := newEnv(t, baseConfig(fileNS(t, 1, 4<<20), memNS(2, 4<<20)))
	admin, cntlid := e.adminConnect(subNQN, hostNQN, 1000)
	qs := []*hostQueue{e.ioConnect(1, cntlid, 32), e.ioConnect(2, cntlid, 32), e.ioConnect(3, cntlid, 32)}

	var submitted, completed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, q := range qs {
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := pattern(8192, byte(i*2+g))
				inflight := make(chan struct{}, 8)
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					case inflight <- struct{}{}:
					}
					ops := []uint8{nvmeproto.OpWrite, nvmeproto.OpRead, nvmeproto.OpCompare, nvmeproto.OpFlush, nvmeproto.OpWriteZeroes}
					op := ops[n%len(ops)]
					nsid := uint32(1 + n%3) // 3 is added and removed meanwhile
					cmd := rw(op, nsid, uint64((i*2+g)*1000+n%500), 16, 8192)
					if op == nvmeproto.OpFlush || op == nvmeproto.OpWriteZeroes {
						cmd.SGL = keyed(0)
					}
					cmd.CID = q.nextCID()
					data := buf // host memory the target only reads
					if op == nvmeproto.OpRead {
						data = make([]byte, 8192)
					}
					err := q.conn.Submit(&cmd, data, func(nvmeproto.Completion) {
						completed.Add(1)
						<-inflight
					})
					if err != nil {
						<-inflight
						select {
						case <-q.conn.Done():
							return
						default:
							time.Sleep(time.Millisecond) // queue full
							continue
						}
					}
					submitted.Add(1)
				}
			}()
		}
	}
	// Namespace churn and AERs meanwhile.
	deadline := time.Now().Add(700 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
		ch := admin.submit(&aer, nil)
		if err := e.tgt.AddNamespace(subNQN, memNS(3, 1<<20)); err != nil {
			t.Fatal(err)
		}
		expectOK(t, "AER", wait(t, ch))
		admin.getLog(0x04, nvmeproto.NSIDAll, 0, 4096, 0, false)
		time.Sleep(20 * time.Millisecond)
		if err := e.tgt.RemoveNamespace(subNQN, 3); err != nil {
			t.Fatal(err)
		}
		admin.getLog(0x02, nvmeproto.NSIDAll, 0, 512, 0, false)
	}
	// Reset under load: the I/O queues go away, their commands still complete.
	expectOK(t, "CC.EN=0", admin.propSet(nvmeproto.PropCC, uint32(nvmeproto.CC(0).WithIOSQES(6).WithIOCQES(4))))
	for _, q := range qs {
		waitDone(t, q, 2*time.Second)
	}
	close(stop)
	wg.Wait()
	for _, q := range qs {
		q.conn.Close() // waits for every outstanding command
	}
	if s, c := submitted.Load(), completed.Load(); s != c || s == 0 {
		t.Fatalf("%d commands submitted, %d completed", s, c)
	}
	waitFor(t, func() bool {
		v, _ := admin.propGet(nvmeproto.PropCSTS, false)
		return !nvmeproto.CSTS(v).RDY()
	})
	t.Logf("%d commands", submitted.Load())
}
