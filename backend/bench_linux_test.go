package backend

import (
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
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

// BenchmarkRingSubmitWrite measures what io_submit costs the ring's owner (a poll group)
// for 4 KiB O_DIRECT writes at random offsets of a 256 MiB file: into holes of a sparse
// file, which the file system must allocate, and over blocks already written; each with
// RWF_NOWAIT (the default: what would block goes to the workers) and without. It reports
// the mean and the largest time one submission took on the owner's goroutine
// (submit-ns/op, p99-submit-us, max-submit-us) and the share of requests that went to the workers.
// GONVMF_BENCH_DIR chooses the file system (default: a temporary directory with O_DIRECT).
func BenchmarkRingSubmitWrite(b *testing.B) {
	const size = 256 << 20
	for _, layout := range []string{"sparse", "written"} {
		for _, nowait := range []bool{true, false} {
			name := layout + "/nowait"
			if !nowait {
				name = layout + "/blocking"
			}
			b.Run(name, func(b *testing.B) {
				dir := os.Getenv("GONVMF_BENCH_DIR")
				if dir == "" {
					dir = directDir(b)
				}
				path := filepath.Join(dir, "ring-bench.img")
				os.Remove(path)
				defer os.Remove(path)
				log, _ := testLogger(b)
				be, err := Open(Spec{Kind: KindFile, Path: path, Size: size, LBASize: 4096, Logger: log})
				if err != nil {
					b.Fatal(err)
				}
				defer be.Close()
				if !be.(*fileBackend).direct {
					b.Skip("no O_DIRECT here")
				}
				if layout == "written" {
					chunk := alignedBuf(1 << 20)
					for off := uint64(0); off < size; off += 1 << 20 {
						if err := be.WriteBlocks(chunk, off/4096, false); err != nil {
							b.Fatal(err)
						}
					}
					if err := be.Flush(); err != nil {
						b.Fatal(err)
					}
				}
				e := NewExecutor(be, 0)
				defer e.Close()
				g, err := NewRing(64, -1)
				if err != nil {
					b.Skipf("no AIO context: %v", err)
				}
				defer g.Close()
				g.nowait = nowait
				const qd = 32
				var done atomic.Int32
				reqs := make([]Request, qd)
				bufs := alignedBuf(qd * 4096)
				free := make(chan *Request, qd)
				for i := range reqs {
					reqs[i] = Request{Op: OpWrite, Buf: bufs[i*4096 : (i+1)*4096], Done: func(r *Request) { done.Add(1); free <- r }}
					free <- &reqs[i]
				}
				rnd := uint64(88172645463325252)
				var total, worst time.Duration
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					var r *Request
					for r == nil {
						select {
						case r = <-free:
						default:
							if g.Ready() {
								g.Reap()
							} else {
								time.Sleep(20 * time.Microsecond)
							}
						}
					}
					rnd ^= rnd << 13
					rnd ^= rnd >> 7
					rnd ^= rnd << 17
					r.SLBA = rnd % (size / 4096)
					t0 := time.Now()
					e.SubmitRing(g, r)
					d := time.Since(t0)
					total += d
					worst = max(worst, d)
					lat = append(lat, d)
				}
				for done.Load() < int32(b.N) {
					if g.Ready() {
						g.Reap()
					} else {
						time.Sleep(20 * time.Microsecond)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "submit-ns/op")
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-submit-us")
				b.ReportMetric(float64(worst.Microseconds()), "max-submit-us")
				b.ReportMetric(100*float64(g.Fallbacks())/float64(b.N), "%-to-workers")
			})
		}
	}
}
