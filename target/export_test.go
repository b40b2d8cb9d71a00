package target

import (
	"os"
	"time"

	"github.com/gonvmf/gonvmf/internal/dhchap"
)

// SetSyncDir replaces the state file's directory fsync until the returned function runs.
func SetSyncDir(f func(*os.File) error) (restore func()) {
	old := syncDir
	syncDir = f
	return func() { syncDir = old }
}

// SetShutdownIdleFloor replaces the floor of the shutdown idle timeout until the returned
// function runs.
func SetShutdownIdleFloor(d time.Duration) (restore func()) {
	old := shutdownIdleFloor
	shutdownIdleFloor = d
	return func() { shutdownIdleFloor = old }
}

// SetAuthSlots makes targets created from now on run at most n authentication steps at
// once, until the returned function runs.
func SetAuthSlots(n int) (restore func()) {
	old := authSlotsFixed
	authSlotsFixed = n
	return func() { authSlotsFixed = old }
}

// HoldANAStates holds p's ANA state changes, before they publish the new state, until the
// returned function runs.
func HoldANAStates(p *Port) (release func()) {
	p.anaMu.Lock()
	return p.anaMu.Unlock
}

// HoldChanges holds t's configuration changes (SetNamespaceANAGroup among them), before
// they apply, until the returned function runs.
func HoldChanges(t *Target) (release func()) {
	t.cfgMu.Lock()
	return t.cfgMu.Unlock
}

// SetSecretFileLoad replaces the read of the "file:" secrets of targets created from now
// on (each value is "file:<path>") until the returned function runs.
func SetSecretFileLoad(f func(value string) (*dhchap.Secret, error)) (restore func()) {
	old := loadSecretFile
	loadSecretFile = f
	return func() { loadSecretFile = old }
}

// AuthSlotUsers is the number of t's authentication steps of host that hold or wait for
// one of its authentication slots.
func AuthSlotUsers(t *Target, host string) int {
	t.authSlots.mu.Lock()
	defer t.authSlots.mu.Unlock()
	if h := t.authSlots.hosts[host]; h != nil {
		return h.refs
	}
	return 0
}

// SecretReadWaiters is the number of t's authentication steps waiting for the read of
// secret file path in flight (0 when t serves no hosts section of its own).
func SecretReadWaiters(t *Target, path string) int {
	k, _ := t.authKeys.(*configAuthKeys)
	if k == nil {
		return 0
	}
	return k.reads.waiting(path)
}

// SetInlineAllAdmin makes the admin queues take every command inline that adminMayBlock
// would send to the admin worker, until the returned function runs; set it before
// connecting.
func SetInlineAllAdmin() (restore func()) {
	inlineAllAdmin.Store(true)
	return func() { inlineAllAdmin.Store(false) }
}
