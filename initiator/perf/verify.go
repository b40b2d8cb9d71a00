package perf

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Verify mode stamps every logical block perf writes with a header and fills the rest
// with a pattern derived from it:
//
//	0..3 magic "GNV1" · 4..7 CRC-32C of bytes 8..end · 8..15 LBA · 16..23 generation ·
//	24..31 run identity · 32..end pseudo-random words from (LBA, generation, identity)
//
// A read checks the magic, the CRC, the LBA, the run identity (the seed mixed with the
// run's start time: see perfState.stamp) and that the generation is the last one written
// to that block in this run. Before a verified read the buffer's headers are cleared, so
// a read the target completes without writing the buffer fails the check.

const stampMagic = 0x31564e47 // "GNV1" little-endian

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// stampBlock stamps one logical block.
func stampBlock(b []byte, lba, gen, seed uint64) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], stampMagic)
	le.PutUint64(b[8:], lba)
	le.PutUint64(b[16:], gen)
	le.PutUint64(b[24:], seed)
	x := lba*0x9E3779B97F4A7C15 ^ gen<<40 ^ seed
	for i := 32; i+8 <= len(b); i += 8 {
		x += 0x9E3779B97F4A7C15
		z := (x ^ x>>30) * 0xBF58476D1CE4E5B9
		le.PutUint64(b[i:], z^z>>31)
	}
	le.PutUint32(b[4:], crc32.Checksum(b[8:], castagnoli))
}

// unstampBlocks clears the header of every block of an I/O buffer (before a read into it).
func unstampBlocks(b []byte, bs int) {
	for off := 0; off < len(b); off += bs {
		clear(b[off : off+min(bs, 32)])
	}
}

// stampBlocks stamps every block of an I/O starting at lba.
func stampBlocks(b []byte, bs int, lba, gen, seed uint64) {
	for off := 0; off < len(b); off += bs {
		stampBlock(b[off:off+bs], lba, gen, seed)
		lba++
	}
}

// mismatch describes a block that did not read back as written.
type mismatch struct {
	LBA     uint64 `json:"lba"`
	WantGen uint64 `json:"expected_generation"`
	Magic   bool   `json:"magic_ok"`
	CRC     bool   `json:"crc_ok"`
	GotLBA  uint64 `json:"got_lba"`
	GotGen  uint64 `json:"got_generation"`
	GotSeed uint64 `json:"got_seed"`
	Seed    uint64 `json:"seed"`
}

func (m *mismatch) String() string {
	switch {
	case !m.Magic:
		return fmt.Sprintf("LBA %d: expected generation %d, got a block without a perf stamp (never written, or overwritten by someone else)", m.LBA, m.WantGen)
	case !m.CRC:
		return fmt.Sprintf("LBA %d: expected generation %d, got corrupted data (CRC mismatch; header says LBA %d generation %d)",
			m.LBA, m.WantGen, m.GotLBA, m.GotGen)
	case m.GotSeed != m.Seed:
		return fmt.Sprintf("LBA %d: expected generation %d of run %#x, got data of another run %#x (LBA %d generation %d)",
			m.LBA, m.WantGen, m.Seed, m.GotSeed, m.GotLBA, m.GotGen)
	}
	return fmt.Sprintf("LBA %d: expected LBA %d generation %d, got LBA %d generation %d", m.LBA, m.LBA, m.WantGen, m.GotLBA, m.GotGen)
}

// checkBlock verifies one block; it returns nil if it holds (lba, gen, seed).
func checkBlock(b []byte, lba, gen, seed uint64) *mismatch {
	le := binary.LittleEndian
	m := mismatch{LBA: lba, WantGen: gen, Seed: seed}
	m.Magic = le.Uint32(b[0:]) == stampMagic
	m.CRC = le.Uint32(b[4:]) == crc32.Checksum(b[8:], castagnoli)
	m.GotLBA, m.GotGen, m.GotSeed = le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:])
	if m.Magic && m.CRC && m.GotLBA == lba && m.GotGen == gen && m.GotSeed == seed {
		return nil
	}
	return &m
}
