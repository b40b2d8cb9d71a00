package perf

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHistogramBuckets(t *testing.T) {
	// Every value lands in a bucket whose range holds it; bucket ranges tile the line.
	prevHigh := uint64(0)
	for i := 0; i < histBuckets; i++ {
		lo, hi := histLow(i), histHigh(i)
		if i > 0 && lo != prevHigh+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHigh)
		}
		if histIndex(lo) != i || histIndex(hi) != i {
			t.Fatalf("bucket %d [%d, %d]: index(lo)=%d index(hi)=%d", i, lo, hi, histIndex(lo), histIndex(hi))
		}
		if lo >= 1<<(histSub+1) && float64(hi-lo+1)/float64(lo) > 1.0/(1<<histSub)+1e-12 {
			t.Fatalf("bucket %d [%d, %d] wider than 1/%d of its value", i, lo, hi, 1<<histSub)
		}
		prevHigh = hi
	}
	if histIndex(math.MaxUint64) != histBuckets-1 {
		t.Errorf("huge value in bucket %d", histIndex(math.MaxUint64))
	}
}

func TestHistogramPercentiles(t *testing.T) {
	var h histogram
	// 1..100 exactly: small values are exact.
	for v := uint64(1); v <= 100; v++ {
		h.record(v)
	}
	for _, c := range []struct {
		p    float64
		want uint64
	}{{50, 50}, {90, 90}, {99, 99}, {99.9, 100}, {100, 100}, {0, 1}} {
		if got := h.percentile(c.p); got != c.want {
			t.Errorf("p%v = %d, want %d", c.p, got, c.want)
		}
	}
	if h.min != 1 || h.max != 100 || h.mean() != 50.5 || h.n != 100 {
		t.Errorf("min %d max %d mean %v n %d", h.min, h.max, h.mean(), h.n)
	}

	// Random latencies: percentiles within the bucket precision of the exact ones.
	var g histogram
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([]uint64, 100000)
	for i := range vals {
		vals[i] = uint64(r.ExpFloat64()*80000) + 5000 // ns
		g.record(vals[i])
	}
	slices.Sort(vals)
	for _, p := range []float64{50, 90, 99, 99.9} {
		exact := vals[int(math.Ceil(p/100*float64(len(vals))))-1]
		got := g.percentile(p)
		if math.Abs(float64(got)-float64(exact))/float64(exact) > 1.0/(1<<histSub) {
			t.Errorf("p%v = %d, exact %d", p, got, exact)
		}
	}
	if g.percentile(100) != vals[len(vals)-1] || g.min != vals[0] {
		t.Errorf("max/min: %d %d vs %d %d", g.percentile(100), g.min, vals[len(vals)-1], vals[0])
	}

	// Merging equals recording everything in one.
	var a, b, all histogram
	for i, v := range vals[:1000] {
		if i%2 == 0 {
			a.record(v)
		} else {
			b.record(v)
		}
		all.record(v)
	}
	a.merge(&b)
	if a != all {
		t.Error("merge differs from recording into one histogram")
	}
	var empty histogram
	if empty.percentile(50) != 0 || empty.mean() != 0 {
		t.Error("empty histogram")
	}
}
