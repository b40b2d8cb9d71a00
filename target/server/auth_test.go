package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/server"
)

const authHost = "nqn.2014-08.org.nvmexpress:uuid:3f2c0a4e-9d1b-4e7a-8c55-6b0d2e1f4a93"

func newSecret(t *testing.T) string {
	t.Helper()
	s, err := dhchap.GenerateSecret(rand.Reader, nvmeproto.AuthHashSHA256, 32)
	if err != nil {
		t.Fatal(err)
	}
	return s.Encode()
}

// authDial connects authHost to the loop server with secret ("" for none).
func authDial(s *server.Server, secret string) (*initiator.Controller, error) {
	o := initiator.Options{Transport: initiator.TransportLoop, SubNQN: subNQN, HostNQN: authHost, Logger: quiet,
		Queues: 1, DHCHAPSecret: secret,
		Loop: func(depth int) (initiator.LoopConn, error) { return s.Loop().Dial(depth) }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return initiator.Dial(ctx, o)
}

func mustDial(t *testing.T, s *server.Server, secret string) *initiator.Controller {
	t.Helper()
	c, err := authDial(s, secret)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// works writes and reads back a block through c.
func works(t *testing.T, what string, c *initiator.Controller) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns := c.Namespaces()[0]
	want := bytes.Repeat([]byte(what[:1]), 4096)
	got := make([]byte, 4096)
	if _, err := ns.WriteAt(ctx, want, 0, 0); err != nil {
		t.Fatalf("%s: write: %v", what, err)
	}
	if _, err := ns.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s: read back: %v", what, err)
	}
}

// TestReloadAuth: a reload (SIGHUP) changes the hosts section and auth_required live. New
// connections use the new key and the old one is refused; established connections keep
// working; a re-authentication uses the new key, and fails once the host has none.
func TestReloadAuth(t *testing.T) {
	key1, key2 := newSecret(t), newSecret(t)
	base := config("10.99.0.1", 0)
	base.Hosts = []conf.Host{{NQN: authHost, DHCHAPSecret: key1}}
	s := loopServer(t, base)
	c1 := mustDial(t, s, key1)
	works(t, "c1", c1)

	// Rotate the key and require authentication.
	next := base.Clone()
	next.Hosts[0].DHCHAPSecret = key2
	next.Hosts[0].DHCHAPDHGroups = []string{"ffdhe2048"}
	next.Subsystems[0].AuthRequired = true
	changes, err := s.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"host " + authHost + ": dhchap_secret replaced (now DHHC-1:01:<32-byte key>:), dhchap_dhgroups [ffdhe2048 ffdhe3072 ffdhe4096 ffdhe6144 ffdhe8192 null] → [ffdhe2048]",
		"subsystem " + subNQN + ": auth_required false → true"}
	if !slices.Equal(changes, want) {
		t.Errorf("changes:\n%s\nwant\n%s", strings.Join(changes, "\n"), strings.Join(want, "\n"))
	}
	for _, ch := range changes {
		if strings.Contains(ch, strings.Split(key2, ":")[2]) {
			t.Errorf("a change description shows the key: %s", ch)
		}
	}
	works(t, "c1 after the rotation", c1)
	if _, err := authDial(s, key1); !errors.Is(err, initiator.ErrAuthFailed) {
		t.Errorf("new connection with the old key: %v, want ErrAuthFailed", err)
	}
	c2 := mustDial(t, s, key2)
	works(t, "c2 with the new key", c2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c1.Reauthenticate(ctx, key2, ""); err != nil {
		t.Errorf("re-authenticating the old connection with the new key: %v", err)
	}
	works(t, "c1 re-authenticated", c1)
	other := "nqn.2014-08.org.nvmexpress:uuid:00000000-1111-4222-8333-444444444444"
	o := initiator.Options{Transport: initiator.TransportLoop, SubNQN: subNQN, HostNQN: other, Logger: quiet, Queues: 1,
		Loop: func(depth int) (initiator.LoopConn, error) { return s.Loop().Dial(depth) }}
	if _, err := initiator.Dial(ctx, o); !errors.Is(err, initiator.ErrHostNotAllowed) {
		t.Errorf("a host without keys with auth_required: %v, want ErrHostNotAllowed", err)
	}

	// The hosts section cannot lose the only host while a subsystem that allows any
	// host requires authentication: refused, nothing changes.
	running := s.Config().String()
	bad := next.Clone()
	bad.Hosts = nil
	if _, err := s.Reload(bad); err == nil || !strings.Contains(err.Error(), "auth_required") {
		t.Errorf("reload without hosts under auth_required: %v", err)
	}
	if s.Config().String() != running {
		t.Errorf("a refused reload changed the running configuration")
	}

	// Authentication off and the host's entry gone: established connections keep
	// working; the host connects without authenticating; a re-authentication fails and
	// its controller goes.
	off := base.Clone()
	off.Hosts = nil
	if changes, err = s.Reload(off); err != nil {
		t.Fatal(err)
	}
	want = []string{"subsystem " + subNQN + ": auth_required true → false", "remove host " + authHost + " from the hosts section"}
	if !slices.Equal(changes, want) {
		t.Errorf("changes:\n%s\nwant\n%s", strings.Join(changes, "\n"), strings.Join(want, "\n"))
	}
	works(t, "c1 after the host's keys went", c1)
	works(t, "c2 after the host's keys went", c2)
	c3 := mustDial(t, s, "")
	works(t, "c3 without a key", c3)
	var authed, unauthed int
	for _, ci := range s.Target().Controllers() {
		if ci.Authenticated {
			authed++
		} else {
			unauthed++
		}
	}
	if authed != 2 || unauthed != 1 {
		t.Errorf("%d controllers authenticated, %d not; want 2 and 1", authed, unauthed)
	}
	target.AuthFailureGrace = 200 * time.Millisecond // the host reads the failure first, even on a loaded machine
	defer func() { target.AuthFailureGrace = 2 * time.Second }()
	if err := c2.Reauthenticate(ctx, key2, ""); !errors.Is(err, initiator.ErrAuthFailed) {
		t.Errorf("re-authentication after the host's keys were removed: %v, want ErrAuthFailed", err)
	}
	select {
	case <-c2.Done():
	case <-time.After(10 * time.Second):
		t.Error("controller still connected 10 s after its re-authentication failed")
	}
	works(t, "c1 after c2 went", c1)
}

// TestSetHostKeysReadHoldsNoServerChange: while a SetHostKeys's read of its secrets is
// held (as a secret file on a hung mount holds it), another change of the server
// completes; the SetHostKeys applies once its read returns. The old code read under the
// server's change lock, which held every other change until the read ended.
func TestSetHostKeysReadHoldsNoServerChange(t *testing.T) {
	s := loopServer(t, config("10.99.0.1", 0))
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	defer server.SetReadHostKeys(func(tg *target.Target, host string, ch target.HostKeysChange) (*target.HostKeysRead, error) {
		close(entered)
		<-release
		return tg.ReadHostKeys(host, ch)
	})()
	secret := newSecret(t)
	set := make(chan error, 1)
	go func() {
		_, err := s.SetHostKeys(authHost, target.HostKeysChange{DHCHAPSecret: &secret})
		set <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("SetHostKeys did not start reading its secrets within 10 s")
	}
	changed := make(chan error, 1)
	go func() { changed <- s.AddSubsystem(conf.Subsystem{NQN: twoNQN, AllowAnyHost: true}) }()
	select {
	case err := <-changed:
		if err != nil {
			t.Errorf("AddSubsystem while SetHostKeys's read is held: %v", err)
		}
	case <-time.After(10 * time.Second):
		free()
		t.Fatal("AddSubsystem did not complete within 10 s while SetHostKeys's read was held: the read holds the server's changes")
	}
	free()
	select {
	case err := <-set:
		if err != nil {
			t.Fatalf("SetHostKeys after its held read: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SetHostKeys did not return within 10 s of its read's release")
	}
	c := s.Config()
	if h := c.HostByNQN(authHost); h == nil || h.DHCHAPSecret != secret {
		t.Errorf("host entry after SetHostKeys: %+v", h)
	}
	if !slices.ContainsFunc(c.Subsystems, func(cs conf.Subsystem) bool { return cs.NQN == twoNQN }) {
		t.Errorf("subsystem %s missing after AddSubsystem", twoNQN)
	}
}
