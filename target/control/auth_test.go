package control_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/internal/dhchap"
	"github.com/gonvmf/gonvmf/nvmeproto"
	pb "github.com/gonvmf/gonvmf/target/control/controlpb"
	"github.com/gonvmf/gonvmf/target/server"
)

func secret(t *testing.T, h nvmeproto.AuthHashID, n int) string {
	t.Helper()
	s, err := dhchap.GenerateSecret(rand.Reader, h, n)
	if err != nil {
		t.Fatal(err)
	}
	return s.Encode()
}

// keyOf is the base64 part of a DHHC-1 secret: what must never show outside SaveConfig.
func keyOf(s string) string { return strings.Split(s, ":")[2] }

// authHost connects hostNQN to subNQN over the loop with secret ("" for none).
func authHost(s *server.Server, secret string) (*initiator.Controller, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return initiator.Dial(ctx, initiator.Options{Transport: initiator.TransportLoop, SubNQN: subNQN, HostNQN: hostNQN,
		Logger: quiet, Queues: 1, DHCHAPSecret: secret,
		Loop: func(depth int) (initiator.LoopConn, error) { return s.Loop().Dial(depth) }})
}

func readWrite(t *testing.T, what string, c *initiator.Controller) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want, got := bytes.Repeat([]byte{0x5A}, 4096), make([]byte, 4096)
	if _, err := c.Namespaces()[0].WriteAt(ctx, want, 0, 0); err != nil {
		t.Fatalf("%s: write: %v", what, err)
	}
	if _, err := c.Namespaces()[0].ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s: read: %v", what, err)
	}
}

// TestControlHostKeys: a host's DH-HMAC-CHAP key is added and rotated through the API
// while it is connected: its established connection keeps working, a new connection with
// the old key is refused and one with the new key accepted; auth_required toggles live;
// listings never show a secret, and SaveConfig writes them back as given.
func TestControlHostKeys(t *testing.T) {
	s, cl := start(t, testConfig(socketPath(t)))
	c := ctx(t)
	key1, key2, ckey := secret(t, nvmeproto.AuthHashSHA256, 32), secret(t, nvmeproto.AuthHashSHA512, 64), secret(t, 0, 48)

	// A host connected before it has keys keeps working, unauthenticated.
	open, err := authHost(s, "")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()

	h, err := cl.SetHostKeys(c, &pb.SetHostKeysRequest{Nqn: hostNQN, DhchapSecret: &key1,
		DhchapDhgroups: &pb.Names{Names: []string{"ffdhe2048", "null"}}})
	if err != nil {
		t.Fatal(err)
	}
	if h.DhchapSecret != "DHHC-1:01:<32-byte key>:" || h.DhchapCtrlSecret != "" || !slices.Equal(h.DhchapDhgroups, []string{"ffdhe2048", "null"}) ||
		!slices.Equal(h.DhchapHashes, []string{"sha512", "sha384", "sha256"}) || !slices.Equal(h.Subsystems, []string{subNQN}) || h.Controllers != 1 {
		t.Errorf("SetHostKeys answered %v", h)
	}
	readWrite(t, "the connection made without a key", open)
	old, err := authHost(s, key1)
	if err != nil {
		t.Fatalf("connecting with key 1: %v", err)
	}
	defer old.Close()
	readWrite(t, "key 1", old)

	// Rotation: key 2 and a controller secret.
	if _, err := cl.SetHostKeys(c, &pb.SetHostKeysRequest{Nqn: hostNQN, DhchapSecret: &key2, DhchapCtrlSecret: &ckey}); err != nil {
		t.Fatal(err)
	}
	readWrite(t, "the key-1 connection after the rotation", old)
	if _, err := authHost(s, key1); !errors.Is(err, initiator.ErrAuthFailed) {
		t.Errorf("a new connection with the old key: %v, want ErrAuthFailed", err)
	}
	if _, err := authHost(s, ""); !errors.Is(err, initiator.ErrAuthFailed) {
		t.Errorf("a new connection without a key: %v, want ErrAuthFailed", err)
	}
	nw, err := authHost(s, key2)
	if err != nil {
		t.Fatalf("a new connection with the new key: %v", err)
	}
	defer nw.Close()
	readWrite(t, "key 2", nw)
	if err := old.Reauthenticate(c, key2, ckey); err != nil {
		t.Errorf("re-authenticating the old connection with the new key, bidirectionally: %v", err)
	}

	// auth_required: on refuses hosts without keys, from then on; the host connected
	// without a key keeps working; off admits them again.
	sub, err := cl.SetAuthRequired(c, &pb.SetAuthRequiredRequest{Subsystem: subNQN, AuthRequired: true})
	if err != nil || !sub.AuthRequired {
		t.Fatalf("SetAuthRequired on: %v %v", sub, err)
	}
	other := "nqn.2014-08.org.nvmexpress:uuid:00000000-1111-4222-8333-444444444444"
	dialOther := func() error {
		c, err := initiator.Dial(c, initiator.Options{Transport: initiator.TransportLoop, SubNQN: subNQN, HostNQN: other, Logger: quiet, Queues: 1,
			Loop: func(depth int) (initiator.LoopConn, error) { return s.Loop().Dial(depth) }})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dialOther(); !errors.Is(err, initiator.ErrHostNotAllowed) {
		t.Errorf("a host without keys, auth_required on: %v", err)
	}
	readWrite(t, "the connection made without a key, auth_required on", open)
	ctrls, _ := cl.ListControllers(c, &pb.ListControllersRequest{Subsystem: subNQN})
	var authed []bool
	for _, x := range ctrls.Controllers {
		authed = append(authed, x.Authenticated)
	}
	if !slices.Equal(authed, []bool{false, true, true}) {
		t.Errorf("controllers' authenticated: %v, want [false true true]", authed)
	}
	// The only host with keys cannot go while a subsystem allowing any host requires
	// authentication (no host could connect).
	_, err = cl.RemoveHostKeys(c, &pb.RemoveHostKeysRequest{Nqn: hostNQN})
	wantCode(t, "removing the only host's keys under auth_required", err, codes.InvalidArgument, "auth_required")
	if _, err := cl.SetAuthRequired(c, &pb.SetAuthRequiredRequest{Subsystem: subNQN, AuthRequired: false}); err != nil {
		t.Fatal(err)
	}
	if err := dialOther(); err != nil {
		t.Errorf("a host without keys, auth_required off: %v", err)
	}

	// Listings redact; save writes the secrets as given, file: secrets as their path.
	dir := t.TempDir()
	kf := filepath.Join(dir, "other.key")
	if err := os.WriteFile(kf, []byte(key1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fileSecret := "file:" + kf
	if _, err := cl.SetHostKeys(c, &pb.SetHostKeysRequest{Nqn: other, DhchapSecret: &fileSecret,
		DhchapHashes: &pb.Names{Names: []string{"hmac(sha256)"}}}); err != nil {
		t.Fatal(err)
	}
	ls, err := cl.ListHostKeys(c, &pb.ListHostKeysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := protojson.Marshal(ls)
	for _, k := range []string{key1, key2, ckey} {
		if strings.Contains(string(js), keyOf(k)) {
			t.Errorf("ListHostKeys shows a key: %s", js)
		}
	}
	if len(ls.Hosts) != 2 || ls.Hosts[0].DhchapSecret != "DHHC-1:03:<64-byte key>:" || ls.Hosts[0].DhchapCtrlSecret != "DHHC-1:00:<48-byte key>:" ||
		ls.Hosts[1].DhchapSecret != fileSecret || !slices.Equal(ls.Hosts[1].DhchapHashes, []string{"sha256"}) {
		t.Errorf("ListHostKeys: %s", js)
	}
	saved, err := cl.SaveConfig(c, &pb.SaveConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	back, err := conf.Parse([]byte(saved.Yaml), "saved.yaml")
	if err != nil {
		t.Fatalf("the saved configuration does not parse: %v\n%s", err, saved.Yaml)
	}
	if len(back.Hosts) != 2 || back.Hosts[0].DHCHAPSecret != key2 || back.Hosts[0].DHCHAPCtrlSecret != ckey ||
		back.Hosts[1].DHCHAPSecret != fileSecret || !slices.Equal(back.Hosts[1].Hashes(), []nvmeproto.AuthHashID{nvmeproto.AuthHashSHA256}) {
		t.Errorf("saved hosts: %+v", back.Hosts)
	}
	if err := back.CheckSystem(); err != nil {
		t.Errorf("the saved configuration fails gonvmf check: %v", err)
	}

	// Errors: the object and the reason, never the secret.
	bad := "DHHC-1:01:" + keyOf(key2)[:20] + ":"
	_, err = cl.SetHostKeys(c, &pb.SetHostKeysRequest{Nqn: hostNQN, DhchapSecret: &bad})
	wantCode(t, "a mangled secret", err, codes.InvalidArgument, "dhchap_secret")
	if err != nil && strings.Contains(err.Error(), keyOf(key2)[:20]) {
		t.Errorf("the error quotes the secret: %v", err)
	}
	missing := "file:" + filepath.Join(dir, "missing.key")
	_, err = cl.SetHostKeys(c, &pb.SetHostKeysRequest{Nqn: hostNQN, DhchapSecret: &missing})
	wantCode(t, "a missing secret file", err, codes.FailedPrecondition, "cannot read the secret file")
	_, err = cl.SetHostKeys(c, &pb.SetHostKeysRequest{Nqn: "nqn.2014-08.org.nvmexpress:uuid:99999999-1111-4222-8333-444444444444",
		DhchapHashes: &pb.Names{Names: []string{"md5"}}})
	wantCode(t, "a new host without a secret, a bad hash", err, codes.InvalidArgument, "dhchap_secret: missing")
	wantCode(t, "a new host without a secret, a bad hash", err, codes.InvalidArgument, `"md5" is not a DH-HMAC-CHAP hash function`)
	_, err = cl.SetHostKeys(c, &pb.SetHostKeysRequest{Nqn: hostNQN})
	wantCode(t, "a request that sets nothing", err, codes.InvalidArgument, "sets nothing")
	empty := " "
	_, err = cl.SetHostKeys(c, &pb.SetHostKeysRequest{Nqn: hostNQN, DhchapSecret: &empty})
	wantCode(t, "an empty secret", err, codes.InvalidArgument, "dhchap_secret is empty")
	_, err = cl.RemoveHostKeys(c, &pb.RemoveHostKeysRequest{Nqn: "nqn.2014-08.org.nvmexpress:uuid:99999999-1111-4222-8333-444444444444"})
	wantCode(t, "removing an unknown host", err, codes.NotFound, "no entry in the hosts section")
	_, err = cl.SetAuthRequired(c, &pb.SetAuthRequiredRequest{Subsystem: "nqn.2024-01.io.gonvmf:nope", AuthRequired: true})
	wantCode(t, "auth_required of an unknown subsystem", err, codes.NotFound, "no such subsystem")
	if after, _ := cl.SaveConfig(c, &pb.SaveConfigRequest{}); stripHead(after.Yaml) != stripHead(saved.Yaml) {
		t.Errorf("failed calls changed the configuration:\n%s", after.Yaml)
	}

	// Removing a host's entry: its connections keep working; it connects without keys.
	if _, err := cl.RemoveHostKeys(c, &pb.RemoveHostKeysRequest{Nqn: hostNQN}); err != nil {
		t.Fatal(err)
	}
	readWrite(t, "key 2 after the host's keys went", nw)
	plain, err := authHost(s, "")
	if err != nil {
		t.Fatalf("connecting without a key after the host's keys went: %v", err)
	}
	plain.Close()
}

// stripHead drops SaveConfig's first line (a comment with the time).
func stripHead(s string) string {
	_, rest, _ := strings.Cut(s, "\n")
	return rest
}
