package conf

import (
	"strings"
	"testing"
)

// namespaceFixes are the namespace errors whose fixes name keys: the fix as the file reads
// it, and as FixText writes it with each key marked <key=value>.
var namespaceFixes = []struct {
	name, ns, field, fix, marked string
}{
	{"rbd missing", "      - nsid: 1\n        backend: rbd\n", "rbd",
		"name the image, e.g. rbd: {pool: rbd, image: vol1}", "name the image, e.g. <rbd{rbd.pool=rbd rbd.image=vol1}>"},
	{"rbd pool missing", "      - nsid: 1\n        backend: rbd\n        rbd:\n          image: vol1\n", "rbd.pool",
		"name the pool, e.g. pool: rbd", "name the pool, e.g. <rbd.pool=rbd>"},
	{"rbd user with client.", "      - nsid: 1\n        backend: rbd\n        rbd: {pool: rbd, image: vol1, user: client.gonvmf}\n", "rbd.user",
		"write user: gonvmf", "write <rbd.user=gonvmf>"},
	{"rbd create_size read-only", "      - nsid: 1\n        backend: rbd\n        read_only: true\n        rbd: {pool: rbd, image: vol1, create_size: 1GiB}\n", "rbd.create_size",
		"create the image first (rbd create), or remove read_only", "create the image first (rbd create), or remove <read_only>"},
	{"rbd create_size 0", "      - nsid: 1\n        backend: rbd\n        rbd: {pool: rbd, image: vol1, create_size: 0}\n", "rbd.create_size",
		"give a size, e.g. create_size: 10GiB, or remove create_size", "give a size, e.g. <rbd.create_size=10GiB>, or remove <rbd.create_size>"},
	{"rbd on a file namespace", "      - nsid: 1\n        backend: file\n        path: /srv/a.img\n        rbd: {pool: rbd, image: vol1}\n", "rbd",
		"remove rbd, or set backend: rbd", "remove <rbd>, or set <backend=rbd>"},
	{"file path missing", "      - nsid: 1\n        backend: file\n", "path",
		"file namespaces need the path of their backing file, e.g. path: /var/lib/gonvmf/disk0.img",
		"file namespaces need the path of their backing file, e.g. <path=/var/lib/gonvmf/disk0.img>"},
	{"block with size", "      - nsid: 1\n        backend: block\n        path: /dev/nvme0n1\n        size: 1GiB\n", "size",
		"remove size", "remove <size>"},
	{"null with path", "      - nsid: 1\n        backend: null\n        size: 1GiB\n        path: /srv/a.img\n", "path",
		"remove path, or use backend: file", "remove <path>, or use <backend=file>"},
	{"memory without size", "      - nsid: 1\n        backend: memory\n", "size",
		"memory namespaces need a capacity, e.g. size: 10GiB", "memory namespaces need a capacity, e.g. <size=10GiB>"},
	{"memory too large", "      - nsid: 1\n        backend: memory\n        size: 1PiB\n", "size",
		"use a smaller size, or backend: null for benchmarks that need no data", "use a smaller size, or <backend=null> for benchmarks that need no data"},
	{"rbd with path", "      - nsid: 1\n        backend: rbd\n        path: /dev/rbd0\n        rbd: {pool: rbd, image: vol1}\n", "path",
		"remove path, and write rbd: {pool: rbd, image: vol1}", "remove <path>, and write <rbd{rbd.pool=rbd rbd.image=vol1}>"},
	{"rbd with size", "      - nsid: 1\n        backend: rbd\n        size: 10GiB\n        rbd: {pool: rbd, image: vol1}\n", "size",
		"remove size: to create a missing image write rbd.create_size, to grow one use rbd resize",
		"remove <size>: to create a missing image write <rbd.create_size>, to grow one use rbd resize"},
}

// nsError returns the one error of the namespace configuration ns, at field.
func nsError(t *testing.T, ns, field string) *FieldError {
	t.Helper()
	_, err := Parse([]byte(sub(ns)), "t.yaml")
	errs := Errors(err)
	if len(errs) != 1 || errs[0].Field != "subsystems[0].namespaces[0]."+field {
		t.Fatalf("errors %v, want one at subsystems[0].namespaces[0].%s", err, field)
	}
	return errs[0]
}

// TestNamespaceFixText: a fix that names namespace keys reads in the file's terms — each
// key from the mapping it shares with the field at fault, with its example — and FixText
// gives a front end each key, with its example values, in the same place.
func TestNamespaceFixText(t *testing.T) {
	const prefix = "subsystems[0].namespaces[0]."
	var mark func(k FixKey) string
	mark = func(k FixKey) string {
		s := "<" + strings.TrimPrefix(k.Field, prefix)
		if k.Value != "" {
			s += "=" + k.Value
		}
		if len(k.Sub) > 0 {
			subs := make([]string, len(k.Sub))
			for i, x := range k.Sub {
				subs[i] = strings.Trim(mark(x), "<>")
			}
			s += "{" + strings.Join(subs, " ") + "}"
		}
		return s + ">"
	}
	for _, c := range namespaceFixes {
		fe := nsError(t, c.ns, c.field)
		if fe.Fix != c.fix {
			t.Errorf("%s: Fix %q, want %q", c.name, fe.Fix, c.fix)
		}
		if got := fe.FixText(mark); got != c.marked {
			t.Errorf("%s: FixText %q, want %q", c.name, got, c.marked)
		}
	}
	// A fix that names no key reads the same to every front end.
	fe := nsError(t, "      - nsid: 1\n        backend: null\n        size: 1000\n", "size")
	if got := fe.FixText(mark); got != fe.Fix || fe.Fix != "use 512 or 1024" {
		t.Errorf("size not a multiple of the LBA size: FixText %q, Fix %q, want both %q", got, fe.Fix, "use 512 or 1024")
	}
}
