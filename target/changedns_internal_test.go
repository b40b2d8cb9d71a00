package target

import "testing"

// TestChangedNSListFullKeepsListedNSID: with the Changed Namespace List full (1024
// NSIDs), a change of an NSID already listed leaves the list as it is; only an NSID not
// listed overflows it to the single entry FFFFFFFFh. The old code checked for a full
// list first and overflowed it on any change.
func TestChangedNSListFullKeepsListedNSID(t *testing.T) {
	c := &controller{aec: aecNSAttr}
	for nsid := uint32(1); nsid <= maxChangedNSList; nsid++ {
		c.namespaceChanged(nsid)
	}
	gen := c.changedGen
	c.namespaceChanged(5)
	if len(c.changedNS) != maxChangedNSList || c.changedNS[0] != 1 || c.changedGen != gen {
		t.Fatalf("after a change of listed NSID 5: %d entries, first %#x, %d changes; want the %d listed, unchanged",
			len(c.changedNS), c.changedNS[0], c.changedGen-gen, maxChangedNSList)
	}
	c.namespaceChanged(maxChangedNSList + 1)
	if len(c.changedNS) != 1 || c.changedNS[0] != 0xFFFFFFFF {
		t.Fatalf("after a change of an unlisted NSID in a full list: %d entries, first %#x; want only FFFFFFFFh",
			len(c.changedNS), c.changedNS[0])
	}
}
