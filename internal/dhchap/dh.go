package dhchap

import (
	"errors"
	"fmt"
	"io"
	"math/big"
	"sync"

	"filippo.io/bigmod"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Group is one of the RFC 7919 finite field Diffie-Hellman groups: a safe prime p = 2q+1
// and the generator 2. Groups are shared and immutable.
type Group struct {
	ID       nvmeproto.AuthDHGroupID
	size     int // bytes of p, and of every DH value and shared secret
	expBytes int // length of private exponents
	m        *bigmod.Modulus
	p        *big.Int
	pMinus1  *big.Int
}

// strength is the security strength in bits that the Linux kernel assigns each group (the
// NIST SP 800-56A rev. 3 values); private exponents are 2×strength bits long, as SP
// 800-56A and RFC 7919 §5.2 ask.
var groupDefs = []struct {
	id       nvmeproto.AuthDHGroupID
	hex      string
	strength int
}{
	{nvmeproto.AuthDHGroupFFDHE2048, ffdhe2048P, 112},
	{nvmeproto.AuthDHGroupFFDHE3072, ffdhe3072P, 128},
	{nvmeproto.AuthDHGroupFFDHE4096, ffdhe4096P, 152},
	{nvmeproto.AuthDHGroupFFDHE6144, ffdhe6144P, 176},
	{nvmeproto.AuthDHGroupFFDHE8192, ffdhe8192P, 200},
}

var groups = sync.OnceValue(func() map[nvmeproto.AuthDHGroupID]*Group {
	gs := map[nvmeproto.AuthDHGroupID]*Group{}
	for _, d := range groupDefs {
		p, ok := new(big.Int).SetString(d.hex, 16)
		if !ok {
			panic("dhchap: bad prime for " + d.id.String())
		}
		m, err := bigmod.NewModulus(p.Bytes())
		if err != nil {
			panic(err)
		}
		gs[d.id] = &Group{ID: d.id, size: d.id.ValueSize(), expBytes: 2 * d.strength / 8, m: m, p: p,
			pMinus1: new(big.Int).Sub(p, big.NewInt(1))}
	}
	return gs
})

// LookupGroup returns the group with identifier id; the NULL group and undefined
// identifiers have none.
func LookupGroup(id nvmeproto.AuthDHGroupID) (*Group, error) {
	if g := groups()[id]; g != nil {
		return g, nil
	}
	return nil, fmt.Errorf("dhchap: %v is not a finite field DH group (ffdhe2048..ffdhe8192)", id)
}

// ValueSize returns the size in bytes of the group's DH values and shared secrets.
func (g *Group) ValueSize() int { return g.size }

// ErrPublicValue is wrapped by every rejection of a peer's DH value.
var ErrPublicValue = errors.New("invalid DH public value")

// CheckPublic validates a peer's DH value y: exactly ValueSize bytes, 1 < y < p-1, and
// in the subgroup of order q = (p-1)/2, i.e. a quadratic residue (Euler's criterion
// y^q ≡ 1, computed as the Legendre symbol). The last check rejects values that would
// confine the shared secret to the subgroup of order 2 or leak the exponent's parity.
// It works on public values only.
func (g *Group) CheckPublic(y []byte) error {
	if len(y) != g.size {
		return fmt.Errorf("dhchap: %w: %d bytes, %v values are %d", ErrPublicValue, len(y), g.ID, g.size)
	}
	v := new(big.Int).SetBytes(y)
	if v.Cmp(big.NewInt(1)) <= 0 || v.Cmp(g.pMinus1) >= 0 {
		return fmt.Errorf("dhchap: %w: outside 2..p-2 of %v", ErrPublicValue, g.ID)
	}
	if big.Jacobi(v, g.p) != 1 {
		return fmt.Errorf("dhchap: %w: not in the prime-order subgroup of %v", ErrPublicValue, g.ID)
	}
	return nil
}

// KeyPair is an ephemeral DH key pair of one authentication transaction.
type KeyPair struct {
	g      *Group
	x      []byte // private exponent, big-endian, g.expBytes long
	public []byte
}

// wipe clears the private exponent (the pair is of no use after).
func (kp *KeyPair) wipe() { clear(kp.x) }

// GenerateKey draws a private exponent from r (2×strength bits) and computes the public
// value 2^x mod p in constant time.
func (g *Group) GenerateKey(r io.Reader) (*KeyPair, error) {
	x := make([]byte, g.expBytes)
	for {
		if _, err := io.ReadFull(r, x); err != nil {
			return nil, fmt.Errorf("dhchap: reading a %d-byte private exponent: %w", len(x), err)
		}
		// x ≥ 2 (a uniformly random x is below 2 with probability 2^-(8·len(x)-1)).
		var hi byte
		for _, b := range x[:len(x)-1] {
			hi |= b
		}
		if hi != 0 || x[len(x)-1] > 1 {
			break
		}
	}
	two, err := bigmod.NewNat().SetBytes([]byte{2}, g.m)
	if err != nil {
		return nil, err
	}
	pub := bigmod.NewNat().Exp(two, x, g.m).Bytes(g.m)
	return &KeyPair{g: g, x: x, public: pub}, nil
}

// Group returns the key pair's group.
func (k *KeyPair) Group() *Group { return k.g }

// Public returns the public value g^x mod p, big-endian, ValueSize bytes.
func (k *KeyPair) Public() []byte { return append([]byte(nil), k.public...) }

// SharedSecret checks the peer's DH value with CheckPublic and returns the shared
// secret peer^x mod p, big-endian, ValueSize bytes, computed in constant time.
func (k *KeyPair) SharedSecret(peer []byte) ([]byte, error) {
	if err := k.g.CheckPublic(peer); err != nil {
		return nil, err
	}
	y, err := bigmod.NewNat().SetBytes(peer, k.g.m)
	if err != nil {
		return nil, fmt.Errorf("dhchap: %w: %v", ErrPublicValue, err)
	}
	z := bigmod.NewNat().Exp(y, k.x, k.g.m)
	if z.IsOne() == 1 {
		// Unreachable for a subgroup member and 2 ≤ x < q; kept as the SP 800-56A check.
		return nil, fmt.Errorf("dhchap: %w: shared secret is 1", ErrPublicValue)
	}
	return z.Bytes(k.g.m), nil
}
