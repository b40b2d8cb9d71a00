// Package ratelog limits log lines per key: a refusal caused by a host (a rejected
// connection request, a refused Connect, a queue torn down for a limit) is logged once per
// key — the host's address or NQN — and interval, with the count of the occurrences
// suppressed since, so that a host retrying in a loop cannot flood the log while every
// host's first refusal is still seen.
package ratelog

import (
	"sync"
	"time"
)

// DefaultInterval is the interval of limiters that are not given one.
const DefaultInterval = 10 * time.Second

// maxKeys bounds the keys a Limiter remembers; past it the oldest half is forgotten (a
// forgotten key's next line is logged at once).
const maxKeys = 4096

// Limiter decides, per key, whether a log line is due. The zero value uses
// DefaultInterval. It is safe for concurrent use.
type Limiter struct {
	// Interval is the shortest time between two lines of one key.
	Interval time.Duration

	mu   sync.Mutex
	keys map[string]*entry
	now  func() time.Time // tests
}

type entry struct {
	last       time.Time
	suppressed int
}

// Allow reports whether a line for key is due now; when it is, suppressed is the number
// of lines for key that were not (since the last one logged), to add to the line.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	iv := l.Interval
	if iv <= 0 {
		iv = DefaultInterval
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = make(map[string]*entry)
	}
	e := l.keys[key]
	if e == nil {
		if len(l.keys) >= maxKeys {
			l.forget(now, iv)
		}
		l.keys[key] = &entry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < iv {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

// forget drops keys quiet for a whole interval, and if that is not enough, every key
// older than the median.
func (l *Limiter) forget(now time.Time, iv time.Duration) {
	for k, e := range l.keys {
		if now.Sub(e.last) >= iv && e.suppressed == 0 {
			delete(l.keys, k)
		}
	}
	if len(l.keys) < maxKeys/2 {
		return
	}
	n := 0
	for k := range l.keys { // map order is random: drop about half
		if n%2 == 0 {
			delete(l.keys, k)
		}
		n++
	}
}
