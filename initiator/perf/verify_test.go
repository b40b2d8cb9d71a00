package perf

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"4096": 4096, "4k": 4096, "4K": 4096, "4KiB": 4096, "4kb": 4096, "1m": 1 << 20, "2G": 2 << 30, "0": 0} {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "k", "-1", "4x", "1.5k"} {
		if _, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) succeeded", s)
		}
	}
}

func TestStampCheck(t *testing.T) {
	b := make([]byte, 4096)
	stampBlocks(b, 512, 1000, 3, 0xabc)
	for i := 0; i < 8; i++ {
		if m := checkBlock(b[i*512:(i+1)*512], 1000+uint64(i), 3, 0xabc); m != nil {
			t.Fatalf("block %d: %v", i, m)
		}
	}
	if m := checkBlock(b[:512], 1000, 4, 0xabc); m == nil || !strings.Contains(m.String(), "expected LBA 1000 generation 4, got LBA 1000 generation 3") {
		t.Errorf("stale generation: %v", m)
	}
	if m := checkBlock(b[512:1024], 1000, 3, 0xabc); m == nil || !strings.Contains(m.String(), "got LBA 1001") {
		t.Errorf("wrong LBA: %v", m)
	}
	if m := checkBlock(b[:512], 1000, 3, 0xdef); m == nil || !strings.Contains(m.String(), "another run") {
		t.Errorf("wrong seed: %v", m)
	}
	b[300] ^= 1
	if m := checkBlock(b[:512], 1000, 3, 0xabc); m == nil || m.CRC {
		t.Errorf("corruption: %v", m)
	}
	if m := checkBlock(make([]byte, 512), 5, 1, 1); m == nil || !strings.Contains(m.String(), "without a perf stamp") {
		t.Errorf("zeroes: %v", m)
	}
	// A buffer cleared for a read fails the check until something writes it: a read the
	// target completes without a transfer does not pass on what the buffer held.
	stampBlocks(b, 512, 1000, 3, 0xabc)
	unstampBlocks(b, 512)
	for i := 0; i < 8; i++ {
		if m := checkBlock(b[i*512:(i+1)*512], 1000+uint64(i), 3, 0xabc); m == nil || m.Magic {
			t.Fatalf("block %d after unstampBlocks: %v", i, m)
		}
	}
}
