//go:build cgo && !nordma

package rdmacm

import "testing"

type fakeKid struct{ name string }

func (*fakeKid) Close() error { return nil }

// TestCloseOrderArenasLast: a parent closes its registered memory after every other
// dependent (the QPs that may still be posting from it), keeping their order otherwise.
func TestCloseOrderArenasLast(t *testing.T) {
	a1, a2 := &Arena{}, &Arena{}
	q1, q2, s1 := &fakeKid{"qp1"}, &fakeKid{"qp2"}, &fakeKid{"srq"}
	kids := []closer{a1, q1, a2, q2, s1}
	closeOrder(kids)
	want := []closer{q1, q2, s1, a1, a2}
	for i := range want {
		if kids[i] != want[i] {
			t.Fatalf("close order %v, want the QPs and the SRQ (in their order), then the arenas", kids)
		}
	}
}
