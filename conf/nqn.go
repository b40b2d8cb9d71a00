package conf

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// uuidNQNPrefix starts the UUID form of an NQN, used by hosts without a domain name of
// their own (nvme gen-hostnqn writes these).
const uuidNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"

// nqnExample is shown in error messages.
const nqnExample = "nqn.2024-01.com.example:disk0"

// ValidateNQN reports whether s is a well-formed NVMe Qualified Name: at most 223 bytes of
// UTF-8 without control characters, and either
//
//	nqn.yyyy-mm.<reverse domain name>:<any string>
//	nqn.2014-08.org.nvmexpress:uuid:<8-4-4-4-12 hex UUID>
//
// or the discovery NQN itself. The domain's labels are 1..63 letters, digits and hyphens,
// not starting or ending with a hyphen (RFC 1123). This is what the NVMe Base
// specification (NVMe Qualified Names) asks and what SPDK enforces; the Linux host and
// target check only the length. A configuration accepts any name that passes
// UsableNQN, with a warning when ValidateNQN refuses it.
func ValidateNQN(s string) error {
	if p := nqnProblem(s); p != "" {
		return fmt.Errorf("invalid NQN %q: %s", s, p)
	}
	return nil
}

// UsableNQN reports whether s can name a subsystem or host at all: 1 to 223 bytes of
// UTF-8 without control characters. Anything more (the form ValidateNQN checks) is a
// matter of portability: the Linux host and target accept names such as "testnqn" or
// "blktests-subsystem-1", SPDK refuses them.
func UsableNQN(s string) error {
	if p := nqnUnusable(s); p != "" {
		return fmt.Errorf("invalid NQN %q: %s", s, p)
	}
	return nil
}

// nqnUnusable says why s cannot be an NQN on the wire, or "" when it can.
func nqnUnusable(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case len(s) > MaxNQNLength:
		return fmt.Sprintf("it is %d bytes long, more than the %d an NQN may have", len(s), MaxNQNLength)
	case !utf8.ValidString(s):
		return "it is not valid UTF-8"
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "it contains a control character"
	}
	return ""
}

// hostNQNCaseWarning is the warning for a host NQN of the UUID form whose UUID has
// upper-case hex digits, or "" for any other NQN. Such an NQN is valid (RFC 4122 reads
// UUIDs in either case), but the target compares host NQNs exactly, as the Linux target
// does (strcmp), and hosts write their UUID in lower case (the Linux host's default
// hostnqn, nvme gen-hostnqn): the entry would most likely admit no host.
func hostNQNCaseWarning(s string) (msg, fix string) {
	if !strings.HasPrefix(s, uuidNQNPrefix) {
		return "", ""
	}
	u := s[len(uuidNQNPrefix):]
	if _, err := ParseUUID(u); err != nil || strings.ToLower(u) == u {
		return "", ""
	}
	return fmt.Sprintf("the UUID of %q has upper-case letters, and host NQNs are compared exactly: hosts send theirs in lower case (the Linux host's default, nvme gen-hostnqn)", s),
		fmt.Sprintf("write it as the host's /etc/nvme/hostnqn has it, most likely %s", uuidNQNPrefix+strings.ToLower(u))
}

// nqnProblem says what is wrong with s as an NQN in the specification's form, or "" when
// nothing is.
func nqnProblem(s string) string {
	if p := nqnUnusable(s); p != "" {
		return p
	}
	switch {
	case s == DiscoveryNQN:
		return ""
	case strings.HasPrefix(s, uuidNQNPrefix):
		if _, err := ParseUUID(s[len(uuidNQNPrefix):]); err != nil {
			return fmt.Sprintf("the UUID after %q is malformed: %v", uuidNQNPrefix, err)
		}
		return ""
	case !strings.HasPrefix(s, "nqn."):
		return `it does not start with "nqn."`
	}
	rest := s[len("nqn."):]
	if len(rest) < 8 || !isDigits(rest[0:4]) || rest[4] != '-' || !isDigits(rest[5:7]) || rest[7] != '.' ||
		rest[5:7] < "01" || rest[5:7] > "12" {
		date, _, _ := strings.Cut(rest, ".")
		return fmt.Sprintf("%q after \"nqn.\" is not a yyyy-mm date (the month the domain was owned) followed by '.'", date)
	}
	rest = rest[8:]
	domain, name, found := strings.Cut(rest, ":")
	if !found || name == "" {
		return "there is no ':' and name after the domain"
	}
	if domain == "" {
		return "the reverse domain name between the date and ':' is missing"
	}
	for _, label := range strings.Split(domain, ".") {
		if p := labelProblem(label); p != "" {
			return fmt.Sprintf("the reverse domain name %q is malformed: %s", domain, p)
		}
	}
	return ""
}

func labelProblem(l string) string {
	if l == "" {
		return "it has an empty label (two dots in a row, or a dot at an end)"
	}
	if len(l) > 63 {
		return fmt.Sprintf("label %q is longer than 63 characters", l)
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Sprintf("label %q contains %q; labels hold only letters, digits and hyphens", l, string(c))
		}
	}
	if l[0] == '-' || l[len(l)-1] == '-' {
		return fmt.Sprintf("label %q starts or ends with a hyphen", l)
	}
	return ""
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
