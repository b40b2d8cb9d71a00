package target

import (
	"context"
	"fmt"
	"strings"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/internal/flight"
)

// secretReads reads the hosts' "file:" secrets for configAuthKeys, bounding the time a
// caller waits for one: a file on a hung mount must fail the authentication that needs
// it, not hold the authentication worker for ever, and fail the configuration change (or
// New) that checks it, not hold the target's later changes for ever (checkKeys). Each
// read runs on a goroutine of its own, which the caller waits for until its context is
// done; a read of a file already in flight is joined, not started again, so a file whose
// read never returns holds one goroutine, however many authentications ask for it
// meanwhile. A read that ends is forgotten: the next caller reads the file again (and
// sees a rotated secret). Inline secrets are parsed on the caller's goroutine (no I/O).
//
// A read's goroutine lives until the read returns, whoever still waits: after the
// target closes, or after the New that made it failed, a file that never answers keeps
// one goroutine (and the thread blocked in the read) for each secretReads, that is for
// each target or failed New, that asked for it. The reads are not shared between
// targets: each target's reads go through the loader it was created with.
type secretReads struct {
	load func(value string) (*dhchap.Secret, error) // reads a "file:" value: loadSecretFile

	reads flight.Group[*dhchap.Secret] // by path
}

// loadSecretFile reads a "file:" secret for secretReads (tests replace it).
var loadSecretFile = conf.LoadSecret

// secret returns the secret that v (a dhchap_secret or dhchap_ctrl_secret value)
// gives, waiting for a "file:" secret's read until ctx is done; the error names the file.
func (s *secretReads) secret(ctx context.Context, v string) (*dhchap.Secret, error) {
	path, isFile := strings.CutPrefix(v, conf.SecretFilePrefix)
	if !isFile {
		return conf.LoadSecret(v)
	}
	r := s.reads.Start(path, func() (*dhchap.Secret, error) { return s.load(v) })
	if !s.reads.Wait(ctx, r) {
		return nil, fmt.Errorf("secret file %s: no answer in the time allowed (%w); its read is still pending: check the file system that holds it",
			path, context.Cause(ctx))
	}
	return r.Result()
}

// waiting is the number of callers waiting for the read of path in flight (tests).
func (s *secretReads) waiting(path string) int { return s.reads.Waiting(path) }
