package testutil

import (
	"log/slog"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// TestLoggerAfterTheTest: goroutines of the code under test may log after the test that
// made the logger finished; that must not panic (t.Log would).
func TestLoggerAfterTheTest(t *testing.T) {
	t.Setenv(EnvLog, "1")
	var log *slog.Logger
	t.Run("inner", func(t *testing.T) {
		log = Logger(t)
		log.Debug("during the test")
	})
	log.Debug("after the test (on standard error)")
}

func TestExpect(t *testing.T) {
	ok := nvmeproto.Completion{}
	ExpectOK(t, "success", ok)
	Expect(t, "invalid field", nvmeproto.Completion{Status: nvmeproto.StatusInvalidField}, nvmeproto.StatusInvalidField)
}
