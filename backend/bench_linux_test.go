package backend

import (
	"path/filepath"
	"testing"
)

// BenchmarkExecutor measures 4 KiB reads and writes through an Executor the way a
// transport drives it: one submitting goroutine keeps qd requests in flight and resubmits
// each as it completes. Offsets are pseudo-random within a 64 MiB region that is written
// once first, so reads hit allocated blocks. ns/op is per request.
func BenchmarkExecutor(b *testing.B) {
	const region = 64 << 20
	type bk struct {
		name string
		open func(b *testing.B) Backend
	}
	fileSpec := func(b *testing.B, dir string, sys sysOps) Backend {
		log, _ := testLogger(b)
		be, err := Open(Spec{Kind: KindFile, Path: filepath.Join(dir, "bench.img"), Size: region, LBASize: 4096, Logger: log, sys: sys})
		if err != nil {
			b.Fatal(err)
		}
		return be
	}
	backends := []bk{
		{"null", func(b *testing.B) Backend {
			be, _ := Open(Spec{Kind: KindNull, Size: region, LBASize: 4096})
			return be
		}},
		{"memory", func(b *testing.B) Backend {
			be, _ := Open(Spec{Kind: KindMemory, Size: region, LBASize: 4096})
			return be
		}},
		{"file-direct", func(b *testing.B) Backend { return fileSpec(b, directDir(b), nil) }},
		{"file-buffered", func(b *testing.B) Backend {
			return fileSpec(b, b.TempDir(), &faultSys{refuseDirect: true, quiet: true})
		}},
	}
	for _, bkd := range backends {
		for _, op := range []Op{OpRead, OpWrite} {
			b.Run(bkd.name+"/"+op.String()+"-4k", func(b *testing.B) {
				be := bkd.open(b)
				defer be.Close()
				// Populate the region so reads find data.
				chunk := alignedBuf(1 << 20)
				fill(chunk, 1)
				for off := uint64(0); off < region; off += 1 << 20 {
					if err := be.WriteBlocks(chunk, off/4096, false); err != nil {
						b.Fatal(err)
					}
				}
				runQD(b, be, op, 32, region/4096)
			})
		}
	}
}

func runQD(b *testing.B, be Backend, op Op, qd int, blocks uint64) {
	runQDSize(b, be, op, qd, blocks, 4096)
}

// runQDSize is runQD with requests of bs bytes at bs-aligned offsets (blocks counts 4 KiB
// blocks).
func runQDSize(b *testing.B, be Backend, op Op, qd int, blocks uint64, bs int) {
	e := NewExecutor(be, 0)
	defer e.Close()
	done := make(chan *Request, qd)
	reqs := make([]Request, qd)
	pool := alignedBuf(qd * bs)
	per := uint64(bs / 4096)
	rnd := uint64(88172645463325252)
	next := func() uint64 { // xorshift64
		rnd ^= rnd << 13
		rnd ^= rnd >> 7
		rnd ^= rnd << 17
		return rnd % (blocks / per) * per
	}
	for i := range reqs {
		reqs[i] = Request{Op: op, Buf: pool[i*bs : (i+1)*bs], Done: func(r *Request) { done <- r }}
	}
	b.SetBytes(int64(bs))
	b.ReportAllocs()
	b.ResetTimer()
	inflight := 0
	for i := range reqs[:min(qd, b.N)] {
		reqs[i].SLBA = next()
		e.Submit(&reqs[i])
		inflight++
	}
	for n := inflight; inflight > 0; {
		r := <-done
		inflight--
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		if n < b.N {
			r.SLBA = next()
			e.Submit(r)
			inflight++
			n++
		}
	}
}
