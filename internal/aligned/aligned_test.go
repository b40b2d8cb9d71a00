package aligned

import "testing"

func TestBytes(t *testing.T) {
	for _, n := range []int{0, 1, 511, 4096, 4097, 1 << 20} {
		for range 4 { // several allocations: the heap hands out differently aligned blocks
			b := Bytes(n)
			if len(b) != n || cap(b) != n || (n > 0 && !Is(b)) {
				t.Fatalf("Bytes(%d): len %d cap %d aligned %v", n, len(b), cap(b), Is(b))
			}
			for i, x := range b {
				if x != 0 {
					t.Fatalf("Bytes(%d)[%d] = %d", n, i, x)
				}
			}
		}
	}
	b := Bytes(8192)
	if Is(b[1:]) || !Is(b[4096:]) {
		t.Error("Is: wrong answer for an offset slice")
	}
}
