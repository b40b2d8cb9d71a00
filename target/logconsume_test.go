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

// TestChangedNSListPartRead: a read of part of the Changed Namespace List returns the
// page as it stands and consumes nothing; the next read of the whole page returns every
// NSID and clears the list. (A part read used to clear the whole list: a host reading the
// page in pieces lost the NSIDs of the pieces after the first.)
func TestChangedNSListPartRead(t *testing.T) {
	e := newEnv(t, baseConfig(memNS(1, 1<<20)))
	admin, _ := e.adminConnect(subNQN, hostNQN, 0)
	if err := <-addNamespaces(e, 2, 4); err != nil {
		t.Fatal(err)
	}
	lid := uint8(nvmeproto.LIDChangedNSList)
	part, c := admin.getLog(lid, 0, 0, 4, 0, false)
	expectOK(t, "first 4 bytes of the changed namespace list", c)
	if v := binary.LittleEndian.Uint32(part); v != 2 {
		t.Fatalf("first entry %d, want 2", v)
	}
	part, c = admin.getLog(lid, 0, 4, 4, 0, false)
	expectOK(t, "second entry of the changed namespace list", c)
	if v := binary.LittleEndian.Uint32(part); v != 3 {
		t.Fatalf("second entry %d, want 3", v)
	}
	seen := map[uint32]bool{}
	changedNSIDs(t, admin, seen)
	if m := missingNSIDs(seen, 2, 4); len(m) != 0 {
		t.Fatalf("after part reads, the whole page lacks %v", m)
	}
	seen = map[uint32]bool{}
	changedNSIDs(t, admin, seen)
	if len(seen) != 0 {
		t.Fatalf("a whole read did not clear the list: %v", seen)
	}
}
