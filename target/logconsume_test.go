package target_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// changedNSIDs reads the Changed Namespace List (without RAE, which clears it and unmasks
// its event) and adds the NSIDs in it to seen.
func changedNSIDs(t *testing.T, admin *hostQueue, seen map[uint32]bool) {
	t.Helper()
	buf, c := admin.getLog(uint8(nvmeproto.LIDChangedNSList), 0, 0, nvmeproto.ChangedNSListSize, 0, false)
	expectOK(t, "changed namespace list", c)
	for i := 0; i+4 <= len(buf); i += 4 {
		v := binary.LittleEndian.Uint32(buf[i:])
		if v == 0 {
			break
		}
		seen[v] = true
	}
}

// missingNSIDs returns the NSIDs from..to-1 that are not in seen.
func missingNSIDs(seen map[uint32]bool, from, to uint32) []uint32 {
	var m []uint32
	for nsid := from; nsid < to; nsid++ {
		if !seen[nsid] && !seen[0xFFFFFFFF] {
			m = append(m, nsid)
		}
	}
	return m
}

// addNamespaces adds memory namespaces first..end-1 to the test subsystem in a goroutine
// of its own, and reports on the channel when it is done (the first error, or nil).
func addNamespaces(e *env, first, end uint32) <-chan error {
	done := make(chan error, 1)
	go func() {
		for nsid := first; nsid < end; nsid++ {
			if err := e.tgt.AddNamespace(subNQN, memNS(nsid, 64<<10)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

// TestChangedNSListLosesNothing: namespaces added while a host reads the Changed
// Namespace List over and over each appear in a page the host got or are still in the
// list afterwards. (Building the page and clearing the list under separate holds of the
// controller's lock lost the NSIDs that arrived in between: 100 adds lost some in every
// run.)
func TestChangedNSListLosesNothing(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	const first, end = 2, 102
	done := addNamespaces(e, first, end)
	seen := map[uint32]bool{}
	for adding := true; adding; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			adding = false
		default:
			changedNSIDs(t, admin, seen)
		}
	}
	changedNSIDs(t, admin, seen)
	if m := missingNSIDs(seen, first, end); len(m) > 0 {
		t.Errorf("namespaces added but never in the Changed Namespace List: %v", m)
	}
}

// TestChangedNSEventLosesNothing: a host that reads the Changed Namespace List only when
// told (an Asynchronous Event Request outstanding, the list read without RAE on each
// Namespace Attribute Changed event, as the Linux host does) learns of every namespace
// added meanwhile.
func TestChangedNSEventLosesNothing(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	const first, end = 2, 102
	done := addNamespaces(e, first, end)
	defer func() {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	seen := map[uint32]bool{}
	for len(missingNSIDs(seen, first, end)) > 0 {
		aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
		select {
		case c := <-admin.submit(&aer, nil):
			expectOK(t, "AER", c)
			if ev := nvmeproto.AsyncEvent(c.DW0); ev != nvmeproto.EventNamespaceAttrChanged {
				t.Fatalf("event %v, want namespace attribute changed", ev)
			}
		case <-time.After(5 * time.Second):
			m := missingNSIDs(seen, first, end)
			t.Fatalf("no event for 5 s with %d namespaces added but not reported: %v", len(m), m[:min(len(m), 10)])
		}
		changedNSIDs(t, admin, seen)
	}
}

// TestChangedNSListPartRead: the Changed Namespace List read in pieces, as libnvme reads
// it with a small transfer size (512 bytes each, RAE on all but the last): the pieces
// before the last return the page as it stands and consume nothing, the last consumes it
// and acknowledges the event, so the next change raises a new one. (Any read used to clear
// the whole list, losing the NSIDs of the later pieces; and a first fix that consumed and
// acknowledged only on a whole-page read left the event masked for good.)
func TestChangedNSListPartRead(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	expectOK(t, "AEC", admin.setFeature(0x0B, 1<<8, nil))
	aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	ch := admin.submit(&aer, nil)
	if err := <-addNamespaces(e, 2, 202); err != nil { // 200 NSIDs: two pieces' worth
		t.Fatal(err)
	}
	expectOK(t, "AER", wait(t, ch))
	lid := uint8(nvmeproto.LIDChangedNSList)
	seen := map[uint32]bool{}
	for off := 0; off < nvmeproto.ChangedNSListSize; off += 512 {
		last := off+512 == nvmeproto.ChangedNSListSize
		part, c := admin.getLog(lid, 0, uint64(off), 512, 0, !last)
		expectOK(t, "a piece of the changed namespace list", c)
		for i := 0; i+4 <= len(part); i += 4 {
			if v := binary.LittleEndian.Uint32(part[i:]); v != 0 {
				seen[v] = true
			}
		}
	}
	if m := missingNSIDs(seen, 2, 202); len(m) != 0 || len(seen) != 200 {
		t.Fatalf("the pieces hold %d NSIDs, lacking %v; want 2..201", len(seen), m)
	}
	seen = map[uint32]bool{}
	changedNSIDs(t, admin, seen)
	if len(seen) != 0 {
		t.Fatalf("the last piece did not consume the list: %v", seen)
	}
	ch = admin.submit(&aer, nil)
	if err := <-addNamespaces(e, 202, 203); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ch:
		expectOK(t, "AER after the pieces", c)
	case <-time.After(2 * time.Second):
		t.Fatal("no event for a namespace added after the list was read in pieces: the event stayed masked")
	}
}

// TestChangedNSListChangeBetweenPieces: a namespace added while the host reads the list in
// pieces lands (the list is sorted) in a piece already read; the last piece then does not
// clear the list but raises the event again, and the next read has the new NSID.
func TestChangedNSListChangeBetweenPieces(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	expectOK(t, "AEC", admin.setFeature(0x0B, 1<<8, nil))
	first := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
	firstCh := admin.submit(&first, nil)
	if err := <-addNamespaces(e, 100, 300); err != nil {
		t.Fatal(err)
	}
	expectOK(t, "AER for the first changes", wait(t, firstCh))
	lid := uint8(nvmeproto.LIDChangedNSList)
	for off := 0; off < nvmeproto.ChangedNSListSize; off += 512 {
		last := off+512 == nvmeproto.ChangedNSListSize
		if off == 512 { // after the first piece: NSID 3 sorts into it
			if err := <-addNamespaces(e, 3, 4); err != nil {
				t.Fatal(err)
			}
		}
		if last {
			aer := sglCmd(nvmeproto.OpAsyncEventRequest, 0, 0)
			ch := admin.submit(&aer, nil)
			_, c := admin.getLog(lid, 0, uint64(off), 512, 0, false)
			expectOK(t, "the last piece", c)
			select {
			case c := <-ch:
				expectOK(t, "AER after a change between the pieces", c)
			case <-time.After(2 * time.Second):
				t.Fatal("no event after the list changed between the pieces: NSID 3 was never reported")
			}
			break
		}
		_, c := admin.getLog(lid, 0, uint64(off), 512, 0, true)
		expectOK(t, "a piece", c)
	}
	seen := map[uint32]bool{}
	changedNSIDs(t, admin, seen)
	if !seen[3] {
		t.Errorf("NSID 3 is not in the list read after the event")
	}
}
