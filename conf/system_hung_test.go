//go:build linux

package conf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonvmf/gonvmf/internal/flight"
)

// TestCheckSystemFilesHung: CheckSystem waits for file system checks that do not answer
// at most systemCheckTimeout, all of them at once, and fails each one's field with the
// path, the time waited and the fix, while the checks that answer report as usual. The
// holds are real: a read lease held on a file namespace's file makes the check's
// read-write open wait until the lease is given up, and the control listener's TLS
// certificate and client CAs are FIFOs, whose open for reading waits for a writer. A
// check that outlives CheckSystem is joined by the next CheckSystem rather than run
// again, and ends once its file answers (no goroutine is left behind).
func TestCheckSystemFilesHung(t *testing.T) {
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk0.img")
	if err := os.WriteFile(disk, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	holder, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	leased := true
	unlease := func() {
		if leased {
			leased = false
			if _, err := unix.FcntlInt(holder.Fd(), unix.F_SETLEASE, unix.F_UNLCK); err != nil {
				t.Errorf("giving up the lease on %s: %v", disk, err)
			}
		}
	}
	t.Cleanup(func() { unlease(); holder.Close() })
	if _, err := unix.FcntlInt(holder.Fd(), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		leased = false
		t.Skipf("cannot take a read lease on %s (leases disabled?): %v", disk, err)
	}
	cert, key, ca := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	for _, fifo := range []string{cert, ca} {
		if err := unix.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(key, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// openWriter opens fifo's writer end and closes it again: a reader waiting in its open
	// goes on and reads the end of the file. On Linux a FIFO opened read-write does not
	// wait for a reader.
	openWriter := func(fifo string) {
		f, err := os.OpenFile(fifo, os.O_RDWR, 0)
		if err != nil {
			t.Errorf("opening the writer end of %s: %v", fifo, err)
			return
		}
		f.Close()
	}
	t.Cleanup(func() { openWriter(cert); openWriter(ca) })
	saved := systemCheckTimeout
	systemCheckTimeout = 50 * time.Millisecond
	t.Cleanup(func() { systemCheckTimeout = saved })

	text := fmt.Sprintf("listeners: [{address: 10.99.0.1}]\nstate_file: none\ncontrol: {tcp: \"127.0.0.1:4421\", tls_cert: %s, tls_key: %s, tls_client_ca: %s}\n", cert, key, ca) +
		"subsystems:\n  - nqn: nqn.2024-01.com.example:sys\n    allow_any_host: true\n    namespaces:\n" +
		"      - {nsid: 1, backend: file, path: " + disk + "}\n" +
		"      - {nsid: 2, backend: file, path: " + dir + "}\n"
	c := mustParse(t, text)
	check := func() error {
		t.Helper()
		checked := make(chan error, 1)
		go func() { checked <- c.CheckSystem() }()
		select {
		case err := <-checked:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("CheckSystem still waits for the held files after 10 s")
			return nil
		}
	}
	err = check()
	errs := Errors(err)
	want := []struct{ field, what string }{
		{"control.tls_cert", cert},
		{"control.tls_client_ca", ca},
		{"subsystems[0].namespaces[0].path", disk},
		{"subsystems[0].namespaces[1].path", ""}, // answers: a directory
	}
	if len(errs) != len(want) {
		t.Fatalf("CheckSystem: %v; want %d errors", err, len(want))
	}
	for i, w := range want {
		e := errs[i]
		if w.what == "" {
			if e.Field != w.field || !strings.Contains(e.Msg, "is a directory") {
				t.Errorf("error %d: %+v, want %s is a directory", i, e, w.field)
			}
			continue
		}
		if e.Field != w.field || !strings.Contains(e.Msg, w.what) || !strings.Contains(e.Msg, "did not answer within 50ms") ||
			!strings.Contains(e.Fix, "hung NFS or FUSE mount") {
			t.Errorf("error %d: %+v, want field %s, the path %s, the time waited and the fix", i, e, w.field, w.what)
		}
	}

	keys := []string{tlsPairCheck(cert, key).key, clientCACheck(ca).key, fileCheck(&c.Subsystems[0].Namespaces[0]).key}
	calls := make([]*flight.Call[fsResult], len(keys))
	for i, k := range keys {
		if calls[i] = fsChecks.Running(k); calls[i] == nil {
			t.Fatalf("no check of %q runs after CheckSystem gave up on it", k)
		}
	}
	if err := check(); len(Errors(err)) != len(want) {
		t.Errorf("CheckSystem again while the files are held: %v; want the same %d errors", err, len(want))
	}
	for i, k := range keys {
		if fsChecks.Running(k) != calls[i] {
			t.Errorf("a CheckSystem while the check of %q runs started another", k)
		}
	}

	openWriter(cert)
	openWriter(ca)
	unlease()
	for i, k := range keys {
		select {
		case <-calls[i].Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("the check of %q did not end within 10 s of its file answering", k)
		}
		if fsChecks.Running(k) != nil {
			t.Errorf("a check of %q still runs after the held one ended", k)
		}
	}
	if r, _ := calls[2].Result(); r.fi == nil || len(r.problems) != 0 {
		t.Errorf("the released check of %s: %+v; want the file and no problem", disk, r)
	}
}
