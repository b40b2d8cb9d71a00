package perf

import (
	"math"
	"math/bits"
)

// histogram is a log-linear latency histogram (as HdrHistogram): values below 2^(sub+1)
// are counted exactly; above, every power-of-two range is split into 2^sub equal buckets,
// so a reported percentile is within 1/2^sub (1.6 % with sub = 6) of the true value.
// Recording is a few instructions and allocates nothing; one histogram per worker,
// merged at the end.
type histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      uint64
	min, max uint64
}

const (
	histSub     = 6
	histMaxBits = 42 // values up to 2^42 ns (73 minutes); larger ones are clamped
	histBuckets = (histMaxBits - histSub + 1) << histSub
)

// histIndex returns the bucket of v.
func histIndex(v uint64) int {
	if v < 1<<(histSub+1) {
		return int(v)
	}
	if v >= 1<<histMaxBits {
		v = 1<<histMaxBits - 1
	}
	shift := bits.Len64(v) - histSub - 1
	return (shift+1)<<histSub + int(v>>uint(shift)) - 1<<histSub
}

// histLow returns the smallest value in bucket i; histHigh the largest.
func histLow(i int) uint64 {
	if i < 1<<(histSub+1) {
		return uint64(i)
	}
	shift := i>>histSub - 1
	return uint64(i&(1<<histSub-1)+1<<histSub) << uint(shift)
}

func histHigh(i int) uint64 {
	if i < 1<<(histSub+1) {
		return uint64(i)
	}
	shift := i>>histSub - 1
	return histLow(i) + 1<<uint(shift) - 1
}

func (h *histogram) record(v uint64) {
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += v
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

func (h *histogram) mean() float64 {
	if h.n == 0 {
		return 0
	}
	return float64(h.sum) / float64(h.n)
}

// percentile returns the value below which p percent of the recorded values fall: the
// middle of the bucket holding the ceil(p/100·n)-th smallest value, clamped to the
// recorded minimum and maximum.
func (h *histogram) percentile(p float64) uint64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p / 100 * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := histLow(i) + (histHigh(i)-histLow(i))/2
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}
