package conf

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Size
		err  string
	}{
		{"4096", 4096, ""},
		{"0", 0, ""},
		{"512B", 512, ""},
		{"8KiB", 8 << 10, ""},
		{"8 kib", 8 << 10, ""},
		{"512MiB", 512 << 20, ""},
		{"10GiB", 10 << 30, ""},
		{"10Gi", 10 << 30, ""},
		{"1.5GiB", 3 << 29, ""},
		{"2TiB", 2 << 40, ""},
		{"1EiB", 1 << 60, ""},
		{"10GB", 10_000_000_000, ""},
		{"4kB", 4000, ""},
		{"10G", 0, `ambiguous unit "G"; write GiB for powers of 1024 or GB`},
		{"4k", 0, `ambiguous unit "K"`},
		{"1.3KiB", 0, "not a whole number of bytes"},
		{"16EiB", 0, "too large"},
		{"99999999999999999999", 0, "too large"},
		{"GiB", 0, "does not start with a number"},
		{"-1", 0, "does not start with a number"},
		{"10 gigs", 0, `unknown unit "gigs"`},
		{"1.2.3MiB", 0, "malformed number"},
	} {
		got, err := ParseSize(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseSize(%q) = %d, %v; want an error containing %q", tc.in, got, err, tc.err)
		}
	}
}

func TestSizeString(t *testing.T) {
	for _, tc := range []struct {
		in   Size
		want string
	}{{0, "0"}, {512, "512"}, {4096, "4KiB"}, {1536, "1536"}, {10 * GiB, "10GiB"}, {3 * TiB, "3TiB"}, {1 << 61, "2EiB"}} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("Size(%d).String() = %q, want %q", uint64(tc.in), got, tc.want)
		}
		if back, err := ParseSize(tc.in.String()); err != nil || back != tc.in {
			t.Errorf("ParseSize(%q) = %v, %v", tc.in.String(), back, err)
		}
	}
	if got := (10 * GiB).Human(); got != "10 GiB" {
		t.Errorf("Human() = %q", got)
	}
}

func TestValidateNQN(t *testing.T) {
	good := []string{
		"nqn.2024-01.com.example:disk0",
		"nqn.2014-08.org.nvmexpress.discovery",
		"nqn.2014-08.org.nvmexpress:uuid:2b0d4a4e-3c1f-4f60-9f0f-6a9d2a1c8e11",
		"nqn.1992-05.io.3com:x",
		"nqn.2024-01.example:a b c/ü", // one label; any UTF-8 after ':'
		"nqn.2024-01.com.example:" + strings.Repeat("x", 223-24),
	}
	for _, s := range good {
		if err := ValidateNQN(s); err != nil {
			t.Errorf("ValidateNQN(%q) = %v", s, err)
		}
	}
	bad := map[string]string{
		"": "empty",
		"nqn.2024-01.com.example:" + strings.Repeat("x", 223-23): "224 bytes long",
		"iqn.2024-01.com.example:x":                              `does not start with "nqn."`,
		"nqn.24-01.com.example:x":                                "not a yyyy-mm date",
		"nqn.2024-00.com.example:x":                              "not a yyyy-mm date",
		"nqn.2024-01com.example:x":                               "not a yyyy-mm date",
		"nqn.2024-01.com.example":                                "no ':' and name",
		"nqn.2024-01.com.example:":                               "no ':' and name",
		"nqn.2024-01.:x":                                         "reverse domain name between the date and ':' is missing",
		"nqn.2024-01.com..example:x":                             "empty label",
		"nqn.2024-01.com.-example:x":                             "starts or ends with a hyphen",
		"nqn.2024-01.com.ex ample:x":                             `contains " "`,
		"nqn.2024-01.com." + strings.Repeat("a", 64) + ":x":      "longer than 63",
		"nqn.2024-01.com.example:a\x00b":                         "control character",
		"nqn.2024-01.com.example:\xff":                           "not valid UTF-8",
		"nqn.2014-08.org.nvmexpress:uuid:not-a-uuid":             "the UUID after",
	}
	for s, want := range bad {
		err := ValidateNQN(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateNQN(%q) = %v; want an error containing %q", s, err, want)
		}
	}
}

// TestDerivedIdentifiersGolden pins the derived identifiers: changing them would change
// every namespace's identity for every host. The values were computed independently
// (Python's uuid.uuid5 and hashlib.sha256 over the documented inputs).
func TestDerivedIdentifiersGolden(t *testing.T) {
	const nqn = "nqn.2024-01.com.example:null0"
	if got := FormatUUID(DeriveUUID(nqn, 1)); got != "4e4b9e70-61b0-5008-b04f-ff5ee9331066" {
		t.Errorf("DeriveUUID = %s", got)
	}
	if got := FormatNGUID(DeriveNGUID(nqn, 1)); got != "31e182327b08aa20afae07b3c05b9f76" {
		t.Errorf("DeriveNGUID = %s", got)
	}
	if got := FormatEUI64(DeriveEUI64(nqn, 1)); got != "aaaa63c12e2170bd" {
		t.Errorf("DeriveEUI64 = %s", got)
	}
	if got := DeriveSerial(nqn); got != "F9A1F55BEC59636D9969" {
		t.Errorf("DeriveSerial = %s", got)
	}
}

func TestDerivedIdentifiersDiffer(t *testing.T) {
	a, b, c := DeriveUUID("nqn.2024-01.com.example:a", 1), DeriveUUID("nqn.2024-01.com.example:a", 2), DeriveUUID("nqn.2024-01.com.example:b", 1)
	if a == b || a == c || b == c {
		t.Errorf("derived UUIDs collide: %x %x %x", a, b, c)
	}
	// The NQN/NSID boundary is unambiguous: "x1" nsid 2 differs from "x" nsid 12.
	if DeriveUUID("nqn.2024-01.com.example:x1", 2) == DeriveUUID("nqn.2024-01.com.example:x", 12) {
		t.Errorf("NQN and NSID run together")
	}
	for nsid := uint32(1); nsid < 200; nsid++ {
		u := DeriveUUID("nqn.2024-01.com.example:a", nsid)
		if u[6]>>4 != 5 || u[8]>>6 != 2 {
			t.Fatalf("UUID %s is not an RFC 9562 version-5 UUID", FormatUUID(u))
		}
		e := DeriveEUI64("nqn.2024-01.com.example:a", nsid)
		if e[0]&0x03 != 0x02 {
			t.Fatalf("EUI-64 %x is not locally administered unicast", e)
		}
		if g := DeriveNGUID("nqn.2024-01.com.example:a", nsid); [16]byte(g) == [16]byte(u) {
			t.Fatalf("NGUID equals UUID")
		}
	}
}

func TestParseIdentifiers(t *testing.T) {
	if u, err := ParseUUID("6F1C2C3E-8a5b-4d2e-9a43-0b1f2e3d4c5b"); err != nil || FormatUUID(u) != "6f1c2c3e-8a5b-4d2e-9a43-0b1f2e3d4c5b" {
		t.Errorf("ParseUUID: %s %v", FormatUUID(u), err)
	}
	for _, s := range []string{"6f1c2c3e8a5b4d2e9a430b1f2e3d4c5b", "6f1c2c3e-8a5b-4d2e-9a43-0b1f2e3d4c5", "6f1c2c3e_8a5b-4d2e-9a43-0b1f2e3d4c5b", "6f1c2c3e-8a5b-4d2e-9a43-0b1f2e3d4cZZ"} {
		if _, err := ParseUUID(s); err == nil {
			t.Errorf("ParseUUID(%q) accepted", s)
		}
	}
	if g, err := ParseNGUID("6f1c2c3e-8a5b-4d2e-9a43-0b1f2e3d4c5b"); err != nil || FormatNGUID(g) != "6f1c2c3e8a5b4d2e9a430b1f2e3d4c5b" {
		t.Errorf("ParseNGUID: %v", err)
	}
	if _, err := ParseNGUID("6f1c2c3e8a5b4d2e"); err == nil {
		t.Errorf("short NGUID accepted")
	}
	for _, s := range []string{"02a0b1c2d3e4f501", "02-a0-b1-c2-d3-e4-f5-01", "02:A0:B1:C2:D3:E4:F5:01"} {
		if e, err := ParseEUI64(s); err != nil || FormatEUI64(e) != "02a0b1c2d3e4f501" {
			t.Errorf("ParseEUI64(%q) = %x, %v", s, e, err)
		}
	}
	if _, err := ParseEUI64("02a0b1c2d3e4f5"); err == nil {
		t.Errorf("short EUI-64 accepted")
	}
}
