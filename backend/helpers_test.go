package backend

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/gonvmf/gonvmf/internal/aligned"
)

// alignedBuf returns an Alignment-aligned buffer of n bytes, as the target's registered
// pool provides.
func alignedBuf(n int) []byte { return aligned.Bytes(n) }

// fill writes a pattern that differs per byte and per seed.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ byte(i>>9) ^ seed
	}
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// logRecorder is a slog.Handler that keeps what it is given.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// has reports whether a record at level with msg containing substr was logged.
func (h *logRecorder) has(level slog.Level, substr string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Level == level && strings.Contains(r.Message, substr) {
			return true
		}
	}
	return false
}

func (h *logRecorder) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var sb strings.Builder
	for _, r := range h.recs {
		sb.WriteString(r.Level.String() + " " + r.Message)
		r.Attrs(func(a slog.Attr) bool { sb.WriteString(" " + a.String()); return true })
		sb.WriteString("\n")
	}
	return sb.String()
}

// testLogger returns a logger that records and also writes to t.Log.
func testLogger(t testing.TB) (*slog.Logger, *logRecorder) {
	rec := &logRecorder{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("backend log:\n%s", rec)
		}
	})
	return slog.New(rec), rec
}
