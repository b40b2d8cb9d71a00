package dhchap

import (
	"bytes"
	"crypto/rand"
	"errors"
	"math/big"
	mrand "math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

var allGroups = []nvmeproto.AuthDHGroupID{
	nvmeproto.AuthDHGroupFFDHE2048, nvmeproto.AuthDHGroupFFDHE3072, nvmeproto.AuthDHGroupFFDHE4096,
	nvmeproto.AuthDHGroupFFDHE6144, nvmeproto.AuthDHGroupFFDHE8192,
}

// TestGroupPrimes checks each prime has the RFC 7919 form (2^b − 2^(b−64) + ... : the top
// and bottom 64 bits set), is a safe prime, and equals OpenSSL's group of the same name.
func TestGroupPrimes(t *testing.T) {
	openssl, _ := exec.LookPath("openssl")
	for _, id := range allGroups {
		g, err := LookupGroup(id)
		if err != nil {
			t.Fatal(err)
		}
		p := g.p
		if p.BitLen() != 8*id.ValueSize() || g.ValueSize() != id.ValueSize() {
			t.Errorf("%v: %d bits", id, p.BitLen())
		}
		ones := new(big.Int).SetUint64(^uint64(0))
		if new(big.Int).And(p, ones).Cmp(ones) != 0 || new(big.Int).Rsh(p, uint(p.BitLen()-64)).Cmp(ones) != 0 {
			t.Errorf("%v: top or bottom 64 bits not all ones", id)
		}
		q := new(big.Int).Rsh(p, 1)
		if !p.ProbablyPrime(0) || !q.ProbablyPrime(0) { // Baillie-PSW
			t.Errorf("%v: not a safe prime", id)
		}
		if openssl == "" {
			continue
		}
		out, err := exec.Command("sh", "-c", "openssl genpkey -genparam -algorithm DH -pkeyopt dh_param:"+id.String()+
			" | openssl asn1parse | grep INTEGER | head -n 1").Output()
		if err != nil {
			t.Logf("openssl could not print %v (%v): comparison skipped", id, err)
			continue
		}
		f := strings.Split(strings.TrimSpace(string(out)), ":")
		if want, ok := new(big.Int).SetString(f[len(f)-1], 16); !ok || want.Cmp(p) != 0 {
			t.Errorf("%v differs from OpenSSL's: %s", id, f[len(f)-1])
		}
	}
	for _, id := range []nvmeproto.AuthDHGroupID{nvmeproto.AuthDHGroupNull, 6, 0xFF} {
		if _, err := LookupGroup(id); err == nil {
			t.Errorf("group %v found", id)
		}
	}
}

// TestKeyAgreement runs the exchange in every group and checks bigmod's results against
// math/big (a second, independent implementation of the same arithmetic).
func TestKeyAgreement(t *testing.T) {
	for _, id := range allGroups {
		g, _ := LookupGroup(id)
		a, err := g.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		b, err := g.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.x) != g.expBytes || g.expBytes*8 < 224 {
			t.Errorf("%v: %d-byte exponent", id, len(a.x))
		}
		pa, pb := a.Public(), b.Public()
		if len(pa) != g.ValueSize() || len(pb) != g.ValueSize() {
			t.Fatalf("%v: public values of %d and %d bytes", id, len(pa), len(pb))
		}
		want := new(big.Int).Exp(big.NewInt(2), new(big.Int).SetBytes(a.x), g.p)
		if want.Cmp(new(big.Int).SetBytes(pa)) != 0 {
			t.Errorf("%v: public value differs from math/big's", id)
		}
		if err := g.CheckPublic(pa); err != nil {
			t.Errorf("%v: own public value rejected: %v", id, err)
		}
		za, err := a.SharedSecret(pb)
		if err != nil {
			t.Fatal(err)
		}
		zb, err := b.SharedSecret(pa)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(za, zb) || len(za) != g.ValueSize() {
			t.Errorf("%v: shared secrets differ", id)
		}
		wantZ := new(big.Int).Exp(new(big.Int).SetBytes(pb), new(big.Int).SetBytes(a.x), g.p)
		if !bytes.Equal(wantZ.FillBytes(make([]byte, g.ValueSize())), za) {
			t.Errorf("%v: shared secret differs from math/big's", id)
		}
		if a.Group() != g {
			t.Error("Group()")
		}
	}
}

// TestSharedSecretPadding: values with leading zero bytes keep the group's full size.
func TestSharedSecretPadding(t *testing.T) {
	g, _ := LookupGroup(nvmeproto.AuthDHGroupFFDHE2048)
	r := mrand.New(mrand.NewPCG(1, 2))
	src := readerFunc(func(b []byte) (int, error) {
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return len(b), nil
	})
	for range 2000 {
		k, err := g.GenerateKey(src)
		if err != nil {
			t.Fatal(err)
		}
		if k.public[0] == 0 {
			if len(k.Public()) != 256 {
				t.Fatal("public value lost its leading zero")
			}
			return
		}
	}
	t.Log("no public value with a leading zero byte in 2000 draws; padding covered by length checks only")
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

func TestCheckPublic(t *testing.T) {
	g, _ := LookupGroup(nvmeproto.AuthDHGroupFFDHE3072)
	pad := func(v *big.Int) []byte { return v.FillBytes(make([]byte, g.ValueSize())) }
	pm1 := new(big.Int).Sub(g.p, big.NewInt(1))
	// The smallest quadratic non-residue: in range, but outside the prime-order subgroup.
	nonResidue := big.NewInt(2)
	for big.Jacobi(nonResidue, g.p) != -1 {
		nonResidue.Add(nonResidue, big.NewInt(1))
	}
	k, _ := g.GenerateKey(rand.Reader)
	for name, y := range map[string][]byte{
		"zero": pad(big.NewInt(0)), "one": pad(big.NewInt(1)), "p-1 (order 2)": pad(pm1),
		"p": pad(g.p), "all ones": bytes.Repeat([]byte{0xFF}, g.ValueSize()),
		"short": pad(big.NewInt(4))[1:], "long": append([]byte{0}, pad(big.NewInt(4))...), "empty": nil,
		"non-residue": pad(nonResidue),
	} {
		if err := g.CheckPublic(y); !errors.Is(err, ErrPublicValue) {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := k.SharedSecret(y); !errors.Is(err, ErrPublicValue) {
			t.Errorf("%s: shared secret computed: %v", name, err)
		}
	}
	if err := g.CheckPublic(pad(big.NewInt(4))); err != nil {
		t.Errorf("4 = 2^2 rejected: %v", err)
	}
}

func TestGenerateKeyErrors(t *testing.T) {
	g, _ := LookupGroup(nvmeproto.AuthDHGroupFFDHE2048)
	if _, err := g.GenerateKey(bytes.NewReader(make([]byte, 5))); err == nil {
		t.Error("short random source accepted")
	}
	// An all-zero draw is retried, not used.
	src := bytes.NewReader(append(make([]byte, g.expBytes), bytes.Repeat([]byte{9}, g.expBytes)...))
	k, err := g.GenerateKey(src)
	if err != nil || k.x[0] != 9 {
		t.Errorf("zero exponent not redrawn: %v", err)
	}
}

func BenchmarkDH(b *testing.B) {
	for _, id := range allGroups {
		g, _ := LookupGroup(id)
		peer, _ := g.GenerateKey(rand.Reader)
		pub := peer.Public()
		b.Run(id.String(), func(b *testing.B) {
			for b.Loop() {
				k, err := g.GenerateKey(rand.Reader)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := k.SharedSecret(pub); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzPeerValue feeds arbitrary peer DH values (network input) to the key agreement: it
// never panics, and what it accepts gives a full-size secret that CheckPublic accepts.
func FuzzPeerValue(f *testing.F) {
	g, _ := LookupGroup(nvmeproto.AuthDHGroupFFDHE2048)
	k, err := g.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	peer, _ := g.GenerateKey(rand.Reader)
	f.Add(peer.Public())
	f.Add(bytes.Repeat([]byte{0xFF}, 256))
	f.Add(make([]byte, 256))
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, y []byte) {
		z, err := k.SharedSecret(y)
		if err != nil {
			if !errors.Is(err, ErrPublicValue) {
				t.Fatalf("error %v does not wrap ErrPublicValue", err)
			}
			return
		}
		if len(z) != g.ValueSize() || g.CheckPublic(y) != nil {
			t.Fatalf("accepted %x: %d-byte secret", y, len(z))
		}
	})
}
