package backend

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"golang.org/x/sys/unix"
)

// openTestFile opens a file backend and closes it when the test ends.
func openTestFile(t *testing.T, s Spec) *fileBackend {
	t.Helper()
	if s.Kind == "" {
		s.Kind = KindFile
	}
	if s.Logger == nil {
		s.Logger, _ = testLogger(t)
	}
	b, err := Open(s)
	if err != nil {
		t.Fatalf("Open(%+v): %v", s, err)
	}
	t.Cleanup(func() { b.Close() })
	return b.(*fileBackend)
}

func TestConformanceFile(t *testing.T) {
	for _, mode := range []string{"direct", "buffered"} {
		for _, lba := range []uint32{512, 4096} {
			t.Run(mode+"/"+lbaName(lba), func(t *testing.T) {
				var dir string
				var sys sysOps
				if mode == "direct" {
					dir = directDir(t)
				} else {
					dir = t.TempDir()
					sys = &faultSys{refuseDirect: true}
				}
				path := filepath.Join(dir, "ns.img")
				runConformance(t, func(t *testing.T, ro bool) Backend {
					log, _ := testLogger(t)
					b, err := Open(Spec{Kind: KindFile, Path: path, Size: conformanceSize, LBASize: lba, ReadOnly: ro, Logger: log, sys: sys})
					if err != nil {
						t.Fatal(err)
					}
					if got := Describe(b).Direct; got != (mode == "direct") {
						t.Fatalf("Info().Direct = %v in %s mode", got, mode)
					}
					return b
				}, lba, kindTraits{persistent: true, reopen: true})
			})
		}
	}
}

// TestFileDirect checks that on a disk filesystem the file backend really uses O_DIRECT,
// on both descriptors, and that the data reaches the file.
func TestFileDirect(t *testing.T) {
	dir := directDir(t)
	path := filepath.Join(dir, "ns.img")
	b := openTestFile(t, Spec{Path: path, Size: 16 << 20, LBASize: 512})
	if !b.Info().Direct {
		t.Fatal("Info().Direct = false on a filesystem that supports O_DIRECT")
	}
	if fl := fdFlags(t, b.fd); fl&unix.O_DIRECT == 0 {
		t.Errorf("data descriptor flags %#x lack O_DIRECT", fl)
	}
	if b.syncF == nil {
		t.Fatal("no O_DSYNC descriptor for FUA writes")
	}
	if fl := fdFlags(t, b.syncFD); fl&unix.O_DIRECT == 0 || fl&unix.O_DSYNC != unix.O_DSYNC {
		t.Errorf("FUA descriptor flags %#x, want O_DIRECT and O_DSYNC", fl)
	}
	w := alignedBuf(64 << 10)
	fill(w, 42)
	if err := b.WriteBlocks(w, 2048, false); err != nil {
		t.Fatal(err)
	}
	// O_DIRECT wrote through to the file: a separate buffered read sees it.
	got := make([]byte, len(w))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(got, 2048*512); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, w) {
		t.Error("file contents differ from the direct write")
	}
	// A misaligned buffer is stopped before it reaches the kernel.
	if err := b.ReadBlocks(w[512:1024], 0); !errors.Is(err, ErrUnaligned) {
		t.Errorf("misaligned read: %v, want ErrUnaligned", err)
	}
}

// TestFileBufferedFallback makes open(O_DIRECT) fail with EINVAL, as tmpfs does on kernels
// before 6.6, and checks the backend warns, falls back to buffered I/O and works.
func TestFileBufferedFallback(t *testing.T) {
	sys := &faultSys{refuseDirect: true}
	log, rec := testLogger(t)
	path := filepath.Join(t.TempDir(), "ns.img")
	b := openTestFile(t, Spec{Path: path, Size: 4 << 20, LBASize: 4096, Logger: log, sys: sys})
	if !rec.has(slog.LevelWarn, "refuses O_DIRECT") {
		t.Errorf("no warning about the O_DIRECT refusal; log:\n%s", rec)
	}
	if n := sys.count(func(c sysCall) bool { return c.name == "open" && c.direct }); n != 1 {
		t.Errorf("%d O_DIRECT open attempts, want 1", n)
	}
	if b.Info().Direct {
		t.Error("Info().Direct = true after the fallback")
	}
	if fl := fdFlags(t, b.fd); fl&unix.O_DIRECT != 0 {
		t.Errorf("fallback descriptor flags %#x have O_DIRECT", fl)
	}
	if fl := fdFlags(t, b.syncFD); fl&unix.O_DSYNC != unix.O_DSYNC || fl&unix.O_DIRECT != 0 {
		t.Errorf("fallback FUA descriptor flags %#x, want O_DSYNC without O_DIRECT", fl)
	}
	w := alignedBuf(3 * 4096)
	fill(w, 8)
	for _, fua := range []bool{false, true} {
		if err := b.WriteBlocks(w, 10, fua); err != nil {
			t.Fatalf("write (fua %v): %v", fua, err)
		}
		r := alignedBuf(len(w))
		if err := b.ReadBlocks(r, 10); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r, w) {
			t.Fatal("buffered read back differs")
		}
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != 4<<20 {
		t.Errorf("file after fallback: %v, %v; want 4 MiB", st, err)
	}
}

// TestFileTmpfs opens a namespace on a real tmpfs and checks the backend chose the mode the
// kernel allows: O_DIRECT on Linux 6.6 and later, the buffered fallback with a warning
// before.
func TestFileTmpfs(t *testing.T) {
	if fsName("/dev/shm") != "tmpfs" {
		t.Skip("/dev/shm is not a tmpfs here")
	}
	dir, err := os.MkdirTemp("/dev/shm", "gonvmf-backend-")
	if err != nil {
		t.Skipf("cannot use /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	kernelDirect := directWorks(dir)
	log, rec := testLogger(t)
	b := openTestFile(t, Spec{Path: filepath.Join(dir, "ns.img"), Size: 1 << 20, Logger: log})
	t.Logf("tmpfs O_DIRECT: kernel %v, backend %v", kernelDirect, b.Info().Direct)
	if b.Info().Direct != kernelDirect {
		t.Errorf("Info().Direct = %v, but O_DIRECT on this tmpfs works: %v", b.Info().Direct, kernelDirect)
	}
	if !kernelDirect && !rec.has(slog.LevelWarn, "O_DIRECT") {
		t.Errorf("buffered fallback without a warning; log:\n%s", rec)
	}
	// tmpfs punches holes but has no ZERO_RANGE: write zeroes steps down to punching.
	w := alignedBuf(64 << 10)
	fill(w, 1)
	if err := b.WriteBlocks(w, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteZeroes(8, 64); err != nil {
		t.Fatal(err)
	}
	r := alignedBuf(len(w))
	if err := b.ReadBlocks(r, 0); err != nil {
		t.Fatal(err)
	}
	if !isZero(r[8*512:72*512]) || !bytes.Equal(r[:8*512], w[:8*512]) || !bytes.Equal(r[72*512:], w[72*512:]) {
		t.Error("write zeroes on tmpfs zeroed the wrong bytes")
	}
	t.Logf("tmpfs write zeroes mode: %s", zeroModeName(b.zeroMode.Load()))
}

func TestFileCreateAndSize(t *testing.T) {
	dir := t.TempDir()
	const MiB = 1 << 20

	t.Run("create", func(t *testing.T) {
		path := filepath.Join(dir, "new.img")
		b := openTestFile(t, Spec{Path: path, Size: 8 * MiB, LBASize: 4096})
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != 8*MiB {
			t.Errorf("created file is %d bytes, want %d", st.Size(), 8*MiB)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("created file mode %v, want 0600", st.Mode().Perm())
		}
		if blocks := st.Sys().(*syscall.Stat_t).Blocks; blocks*512 >= 8*MiB {
			t.Errorf("created file has %d sectors allocated; want it sparse", blocks)
		}
		if b.NumBlocks() != 2048 {
			t.Errorf("NumBlocks = %d, want 2048", b.NumBlocks())
		}
	})

	t.Run("extend", func(t *testing.T) {
		path := filepath.Join(dir, "small.img")
		old := bytes.Repeat([]byte("gonvmf!\n"), 8192) // 64 KiB
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Fatal(err)
		}
		log, rec := testLogger(t)
		b := openTestFile(t, Spec{Path: path, Size: 4 * MiB, Logger: log})
		if st, _ := os.Stat(path); st.Size() != 4*MiB {
			t.Errorf("file is %d bytes after open, want %d", st.Size(), 4*MiB)
		}
		if !rec.has(slog.LevelInfo, "extended") {
			t.Errorf("extension not logged; log:\n%s", rec)
		}
		r := alignedBuf(len(old) + 4096)
		if err := b.ReadBlocks(r, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r[:len(old)], old) || !isZero(r[len(old):]) {
			t.Error("extension changed the old contents or the new tail is not zero")
		}
	})

	t.Run("larger existing file", func(t *testing.T) {
		path := filepath.Join(dir, "large.img")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, 16*MiB); err != nil {
			t.Fatal(err)
		}
		tail := []byte("data after the namespace")
		if err := writeAt(path, tail, 16*MiB-100); err != nil {
			t.Fatal(err)
		}
		b := openTestFile(t, Spec{Path: path, Size: 4 * MiB, LBASize: 512})
		if b.NumBlocks() != 4*MiB/512 {
			t.Errorf("NumBlocks = %d, want %d (the configured size)", b.NumBlocks(), 4*MiB/512)
		}
		if err := b.WriteBlocks(alignedBuf(512), 4*MiB/512, false); !errors.Is(err, ErrLBAOutOfRange) {
			t.Errorf("write past the configured size: %v, want ErrLBAOutOfRange", err)
		}
		if err := b.WriteZeroes(0, b.NumBlocks()); err != nil {
			t.Fatal(err)
		}
		if err := b.Deallocate(0, b.NumBlocks()); err != nil {
			t.Fatal(err)
		}
		b.Close()
		st, _ := os.Stat(path)
		got := make([]byte, len(tail))
		f, _ := os.Open(path)
		f.ReadAt(got, 16*MiB-100)
		f.Close()
		if st.Size() != 16*MiB || !bytes.Equal(got, tail) {
			t.Errorf("the file beyond the namespace changed: size %d, tail %q", st.Size(), got)
		}
	})

	t.Run("size from file", func(t *testing.T) {
		path := filepath.Join(dir, "sized.img")
		if err := os.WriteFile(path, make([]byte, 3*MiB+1000), 0o644); err != nil {
			t.Fatal(err)
		}
		log, rec := testLogger(t)
		b := openTestFile(t, Spec{Path: path, LBASize: 4096, Logger: log})
		if want := uint64(3 * MiB / 4096); b.NumBlocks() != want {
			t.Errorf("NumBlocks = %d, want %d", b.NumBlocks(), want)
		}
		if !rec.has(slog.LevelWarn, "not a multiple") {
			t.Errorf("no warning about the unused tail; log:\n%s", rec)
		}
	})

	t.Run("read-only existing", func(t *testing.T) {
		path := filepath.Join(dir, "ro.img")
		if err := os.WriteFile(path, make([]byte, MiB), 0o444); err != nil {
			t.Fatal(err)
		}
		b := openTestFile(t, Spec{Path: path, ReadOnly: true})
		if fl := fdFlags(t, b.fd); fl&unix.O_ACCMODE != unix.O_RDONLY {
			t.Errorf("read-only namespace descriptor flags %#x, want O_RDONLY", fl)
		}
		if b.syncF != nil {
			t.Error("read-only namespace opened a FUA descriptor")
		}
		if b.NumBlocks() != MiB/512 {
			t.Errorf("NumBlocks = %d", b.NumBlocks())
		}
	})

	errCases := []struct {
		name string
		spec Spec
		prep func(path string)
		want string
	}{
		{"missing without size", Spec{}, nil, "set a size to create it"},
		{"missing read-only", Spec{Size: MiB, ReadOnly: true}, nil, "needs an existing file"},
		{"read-only too small", Spec{Size: 2 * MiB, ReadOnly: true}, func(p string) { os.WriteFile(p, make([]byte, MiB), 0o644) }, "cannot extend"},
		{"size not a multiple", Spec{Size: MiB + 512, LBASize: 4096}, nil, "not a multiple of the lba size"},
		{"bad lba size", Spec{Size: MiB, LBASize: 520}, nil, "lba size 520 is invalid"},
		{"lba size too big", Spec{Size: MiB, LBASize: 8192}, nil, "lba size 8192 is invalid"},
		{"empty file", Spec{}, func(p string) { os.WriteFile(p, make([]byte, 100), 0o644) }, "less than one"},
		{"directory", Spec{Size: MiB}, func(p string) { os.Mkdir(p, 0o755) }, "not a regular file"},
		{"no path", Spec{Size: MiB}, nil, "needs a path"},
	}
	for i, c := range errCases {
		t.Run(c.name, func(t *testing.T) {
			s := c.spec
			s.Kind = KindFile
			if c.name != "no path" {
				s.Path = filepath.Join(dir, "err"+string(rune('a'+i)))
			}
			if c.prep != nil {
				c.prep(s.Path)
			}
			s.Logger, _ = testLogger(t)
			b, err := Open(s)
			if err == nil {
				b.Close()
				t.Fatalf("Open succeeded, want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
			if s.Path != "" && c.name != "bad lba size" && c.name != "size not a multiple" && c.name != "lba size too big" && !strings.Contains(err.Error(), s.Path) {
				t.Errorf("error %q does not name the path", err)
			}
		})
	}
}

func writeAt(path string, p []byte, off int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt(p, off)
	return err
}

// TestFileLock checks that two backends cannot serve the same file.
func TestFileLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	openTestFile(t, Spec{Path: path, Size: 1 << 20})
	for _, ro := range []bool{false, true} {
		log, _ := testLogger(t)
		b, err := Open(Spec{Kind: KindFile, Path: path, Size: 1 << 20, ReadOnly: ro, Logger: log})
		if err == nil {
			b.Close()
			t.Fatalf("second open (read-only %v) of a file in use succeeded", ro)
		}
		if !strings.Contains(err.Error(), "in use") {
			t.Errorf("second open: %v, want an 'in use' error", err)
		}
	}
}

// TestFileShared: shared backends (two targets serving one namespace) open the same file
// together, and neither lets an exclusive opener in; a file held exclusively keeps a
// shared opener out.
func TestFileShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	a := openTestFile(t, Spec{Path: path, Size: 1 << 20, Shared: true})
	log, _ := testLogger(t)
	b, err := Open(Spec{Kind: KindFile, Path: path, Size: 1 << 20, Shared: true, Logger: log})
	if err != nil {
		t.Fatalf("second shared open: %v", err)
	}
	w := alignedBuf(4096)
	fill(w, 0x5a)
	if err := a.WriteBlocks(w, 8, true); err != nil {
		t.Fatal(err)
	}
	r := alignedBuf(4096)
	if err := b.ReadBlocks(r, 8); err != nil || !bytes.Equal(r, w) {
		t.Errorf("the second backend does not read what the first wrote (err %v)", err)
	}
	b.Close()
	if b, err := Open(Spec{Kind: KindFile, Path: path, Size: 1 << 20, Logger: log}); err == nil {
		b.Close()
		t.Errorf("an exclusive open of a shared file succeeded")
	} else if !strings.Contains(err.Error(), "needs shared: true") {
		t.Errorf("exclusive open: %v, want a hint at shared: true", err)
	}

	excl := filepath.Join(t.TempDir(), "excl.img")
	openTestFile(t, Spec{Path: excl, Size: 1 << 20})
	if b, err := Open(Spec{Kind: KindFile, Path: excl, Size: 1 << 20, Shared: true, Logger: log}); err == nil {
		b.Close()
		t.Errorf("a shared open of an exclusively held file succeeded")
	} else if !strings.Contains(err.Error(), "holds it exclusively") {
		t.Errorf("shared open: %v, want 'holds it exclusively'", err)
	}
}

// TestFilePunchHole checks that Deallocate really frees space: st_blocks drops, SEEK_HOLE
// finds the hole, the file keeps its size and the hole reads as zeroes.
func TestFilePunchHole(t *testing.T) {
	path := filepath.Join(directDir(t), "ns.img")
	b := openTestFile(t, Spec{Path: path, Size: 8 << 20, LBASize: 4096})
	if !b.Info().DeallocateReadsZeroes {
		t.Fatal("DeallocateReadsZeroes = false on a filesystem that punches holes")
	}
	w := alignedBuf(2 << 20)
	fill(w, 0x5A)
	if err := b.WriteBlocks(w, 256, false); err != nil { // bytes 1 MiB .. 3 MiB
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	before := statBlocks(t, path)
	if err := b.Deallocate(256+64, 256); err != nil { // bytes 1.25 MiB .. 2.25 MiB
		t.Fatal(err)
	}
	after := statBlocks(t, path)
	if freed := (before - after) * 512; freed < 1<<20 {
		t.Errorf("st_blocks %d -> %d: freed %d bytes, want at least 1 MiB", before, after, freed)
	}
	holeStart := int64(256+64) * 4096
	if off, err := unix.Seek(b.fd, int64(256)*4096, unix.SEEK_HOLE); err != nil || off != holeStart {
		t.Errorf("SEEK_HOLE from 1 MiB = %d, %v; want %d", off, err, holeStart)
	}
	if off, err := unix.Seek(b.fd, holeStart, unix.SEEK_DATA); err != nil || off != holeStart+1<<20 {
		t.Errorf("SEEK_DATA from the hole = %d, %v; want %d", off, err, holeStart+1<<20)
	}
	if st, _ := os.Stat(path); st.Size() != 8<<20 {
		t.Errorf("file size %d after punching, want it kept at %d", st.Size(), 8<<20)
	}
	r := alignedBuf(len(w))
	if err := b.ReadBlocks(r, 256); err != nil {
		t.Fatal(err)
	}
	if !isZero(r[256<<10:(256<<10)+1<<20]) || !bytes.Equal(r[:256<<10], w[:256<<10]) || !bytes.Equal(r[(256<<10)+1<<20:], w[(256<<10)+1<<20:]) {
		t.Error("punched range does not read as zeroes, or its neighbours changed")
	}
}

func statBlocks(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}

// TestFileWriteZeroes checks the write zeroes ladder: ZERO_RANGE where the filesystem has
// it, then PUNCH_HOLE, then writing the zero buffer, each step taken once and remembered.
func TestFileWriteZeroes(t *testing.T) {
	const zeroRange = unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE
	const punch = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	cases := []struct {
		name      string
		errs      map[uint32]error
		wantMode  uint32
		wantCalls map[uint32]int // fallocate calls per mode over two WriteZeroes
		writes    bool           // zero buffer written
	}{
		{"zero range", nil, zeroByRange, map[uint32]int{zeroRange: 2}, false},
		{"punch", map[uint32]error{zeroRange: unix.EOPNOTSUPP}, zeroByPunch, map[uint32]int{zeroRange: 1, punch: 2}, false},
		{"write", map[uint32]error{zeroRange: unix.EOPNOTSUPP, punch: unix.EOPNOTSUPP}, zeroByWrite, map[uint32]int{zeroRange: 1, punch: 0}, true},
	}
	dir := directDir(t)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sys := &faultSys{fallocErr: c.errs}
			path := filepath.Join(dir, "wz"+string(rune('0'+i)))
			b := openTestFile(t, Spec{Path: path, Size: 4 << 20, LBASize: 512, sys: sys})
			w := alignedBuf(1 << 20)
			fill(w, 0x33)
			if err := b.WriteBlocks(w, 0, false); err != nil {
				t.Fatal(err)
			}
			sys.reset()
			if err := b.WriteZeroes(100, 1000); err != nil {
				t.Fatal(err)
			}
			if err := b.WriteZeroes(1500, 8); err != nil {
				t.Fatal(err)
			}
			if b.zeroMode.Load() != c.wantMode {
				t.Errorf("zero mode %s, want %s", zeroModeName(b.zeroMode.Load()), zeroModeName(c.wantMode))
			}
			for mode, want := range c.wantCalls {
				if got := sys.count(func(s sysCall) bool { return s.name == "fallocate" && s.mode == mode }); got != want {
					t.Errorf("fallocate mode %#x called %d times, want %d", mode, got, want)
				}
			}
			if got := sys.count(func(s sysCall) bool { return s.name == "pwrite" }) > 0; got != c.writes {
				t.Errorf("zero buffer written: %v, want %v", got, c.writes)
			}
			r := alignedBuf(len(w))
			if err := b.ReadBlocks(r, 0); err != nil {
				t.Fatal(err)
			}
			for blk := range 2048 {
				zero := (blk >= 100 && blk < 1100) || (blk >= 1500 && blk < 1508)
				got := r[blk*512 : (blk+1)*512]
				if zero && !isZero(got) || !zero && !bytes.Equal(got, w[blk*512:(blk+1)*512]) {
					t.Fatalf("block %d wrong after write zeroes (want zero: %v)", blk, zero)
				}
			}
			if st, _ := os.Stat(path); st.Size() != 4<<20 {
				t.Errorf("file size %d after write zeroes", st.Size())
			}
		})
	}
	t.Run("error", func(t *testing.T) {
		sys := &faultSys{fallocErr: map[uint32]error{zeroRange: unix.EIO}}
		b := openTestFile(t, Spec{Path: filepath.Join(dir, "wzerr"), Size: 1 << 20, sys: sys})
		err := b.WriteZeroes(0, 8)
		if !errors.Is(err, unix.EIO) {
			t.Fatalf("WriteZeroes with EIO: %v", err)
		}
		if s := Status(OpWriteZeroes, err); s != nvmeproto.StatusWriteFault {
			t.Errorf("Status = %v, want Write Fault", s)
		}
		if b.zeroMode.Load() != zeroByRange {
			t.Error("an I/O error made write zeroes give up ZERO_RANGE")
		}
	})
}

// TestFileDeallocateUnsupported: a filesystem that cannot punch holes makes deallocate a
// no-op and the namespace must not claim deallocated blocks read as zeroes.
func TestFileDeallocateUnsupported(t *testing.T) {
	const punch = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	sys := &faultSys{fallocErr: map[uint32]error{punch: unix.EOPNOTSUPP}}
	b := openTestFile(t, Spec{Path: filepath.Join(t.TempDir(), "ns.img"), Size: 1 << 20, sys: sys})
	if b.Info().DeallocateReadsZeroes {
		t.Error("DeallocateReadsZeroes = true without hole punching")
	}
	w := alignedBuf(8192)
	fill(w, 4)
	if err := b.WriteBlocks(w, 0, false); err != nil {
		t.Fatal(err)
	}
	sys.reset()
	if err := b.Deallocate(0, 16); err != nil {
		t.Fatalf("Deallocate: %v", err)
	}
	if n := sys.count(func(c sysCall) bool { return c.name != "open" }); n != 0 {
		t.Errorf("deallocate without hole punching made %d system calls, want none", n)
	}
	r := alignedBuf(8192)
	if err := b.ReadBlocks(r, 0); err != nil || !bytes.Equal(r, w) {
		t.Errorf("no-op deallocate changed data (err %v)", err)
	}
}

// TestFileDeallocateStopsPunching: hole punching worked when the namespace was opened (so
// it reports DeallocateReadsZeroes) and then stops; the promise is kept by zeroing.
func TestFileDeallocateStopsPunching(t *testing.T) {
	const punch = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	sys := &faultSys{}
	log, rec := testLogger(t)
	b := openTestFile(t, Spec{Path: filepath.Join(t.TempDir(), "ns.img"), Size: 1 << 20, sys: sys, Logger: log})
	if !b.Info().DeallocateReadsZeroes {
		t.Fatal("DeallocateReadsZeroes = false")
	}
	w := alignedBuf(8192)
	fill(w, 4)
	if err := b.WriteBlocks(w, 0, false); err != nil {
		t.Fatal(err)
	}
	sys.fallocErr = map[uint32]error{punch: unix.EOPNOTSUPP}
	if err := b.Deallocate(2, 4); err != nil {
		t.Fatal(err)
	}
	r := alignedBuf(8192)
	if err := b.ReadBlocks(r, 0); err != nil {
		t.Fatal(err)
	}
	if !isZero(r[1024:3072]) || !bytes.Equal(r[:1024], w[:1024]) || !bytes.Equal(r[3072:], w[3072:]) {
		t.Error("deallocate after punching stopped did not zero exactly the range")
	}
	if !rec.has(slog.LevelWarn, "stopped punching") {
		t.Errorf("no warning; log:\n%s", rec)
	}
}

// TestFileFUA checks which descriptor and calls make a FUA write durable.
func TestFileFUA(t *testing.T) {
	dir := directDir(t)
	t.Run("o_dsync descriptor", func(t *testing.T) {
		sys := &faultSys{}
		b := openTestFile(t, Spec{Path: filepath.Join(dir, "fua1"), Size: 1 << 20, sys: sys})
		if b.syncF == nil {
			t.Fatal("no O_DSYNC descriptor")
		}
		if fl := fdFlags(t, b.syncFD); fl&unix.O_DSYNC != unix.O_DSYNC {
			t.Fatalf("FUA descriptor flags %#x lack O_DSYNC", fl)
		}
		if fl := fdFlags(t, b.fd); fl&unix.O_DSYNC != 0 {
			t.Fatalf("data descriptor flags %#x have O_DSYNC: every write would be synchronous", fl)
		}
		w := alignedBuf(4096)
		fill(w, 1)
		sys.reset()
		if err := b.WriteBlocks(w, 0, true); err != nil {
			t.Fatal(err)
		}
		if n := sys.count(func(c sysCall) bool { return c.name == "pwrite" && c.fd == b.syncFD }); n != 1 {
			t.Errorf("FUA write: %d pwrites on the O_DSYNC descriptor, want 1", n)
		}
		if n := sys.count(func(c sysCall) bool { return c.name == "pwrite" && c.fd == b.fd }); n != 0 {
			t.Errorf("FUA write: %d pwrites on the plain descriptor, want 0", n)
		}
		sys.reset()
		if err := b.WriteBlocks(w, 8, false); err != nil {
			t.Fatal(err)
		}
		if n := sys.count(func(c sysCall) bool { return c.name == "pwrite" && c.fd == b.fd }); n != 1 {
			t.Errorf("plain write: %d pwrites on the plain descriptor, want 1", n)
		}
		if n := sys.count(func(c sysCall) bool { return c.name == "pwrite" && c.fd == b.syncFD || c.name == "fdatasync" }); n != 0 {
			t.Errorf("plain write made %d synchronous calls, want 0", n)
		}
		sys.reset()
		if err := b.Flush(); err != nil {
			t.Fatal(err)
		}
		if n := sys.count(func(c sysCall) bool { return c.name == "fdatasync" && c.fd == b.fd }); n != 1 {
			t.Errorf("Flush: %d fdatasync calls, want 1", n)
		}
		r := alignedBuf(4096)
		if err := b.ReadBlocks(r, 0); err != nil || !bytes.Equal(r, w) {
			t.Errorf("FUA data did not read back (err %v)", err)
		}
	})
	t.Run("fdatasync fallback", func(t *testing.T) {
		sys := &faultSys{refuseDsync: true}
		log, rec := testLogger(t)
		b := openTestFile(t, Spec{Path: filepath.Join(dir, "fua2"), Size: 1 << 20, sys: sys, Logger: log})
		if b.syncF != nil {
			t.Fatal("O_DSYNC descriptor despite the refusal")
		}
		if !rec.has(slog.LevelWarn, "FUA writes use fdatasync") {
			t.Errorf("no warning; log:\n%s", rec)
		}
		w := alignedBuf(4096)
		sys.reset()
		if err := b.WriteBlocks(w, 0, true); err != nil {
			t.Fatal(err)
		}
		sys.mu.Lock()
		calls := append([]sysCall(nil), sys.calls...)
		sys.mu.Unlock()
		if len(calls) != 2 || calls[0].name != "pwrite" || calls[1].name != "fdatasync" || calls[1].fd != b.fd {
			t.Errorf("FUA write calls %+v, want pwrite then fdatasync", calls)
		}
		sys.reset()
		if err := b.WriteBlocks(w, 0, false); err != nil {
			t.Fatal(err)
		}
		if n := sys.count(func(c sysCall) bool { return c.name == "fdatasync" }); n != 0 {
			t.Errorf("plain write called fdatasync %d times", n)
		}
	})
}

// TestFileShortTransfers feeds the backend short reads and writes and EINTR.
func TestFileShortTransfers(t *testing.T) {
	sys := &faultSys{chop: true}
	b := openTestFile(t, Spec{Path: filepath.Join(t.TempDir(), "ns.img"), Size: 1 << 20, sys: sys})
	w := alignedBuf(16 << 10)
	fill(w, 0x71)
	if err := b.WriteBlocks(w, 5, false); err != nil {
		t.Fatal(err)
	}
	if n := sys.count(func(c sysCall) bool { return c.name == "pwrite" }); n < 32 {
		t.Errorf("%d pwrite calls for 16 KiB in 512-byte pieces", n)
	}
	r := alignedBuf(len(w))
	if err := b.ReadBlocks(r, 5); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r, w) {
		t.Error("data differs after short transfers")
	}
	if err := b.WriteZeroes(5, 20); err != nil { // ZERO_RANGE, not pwrite
		t.Fatal(err)
	}
}

// Ops of TestFileErrors that are an Op with FUA set.
const (
	opFUAWrite Op = 100 + iota
	opFUAWriteZeroes
)

// TestFileErrors checks kernel errors come back wrapped and map to the right statuses.
func TestFileErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		sys  *faultSys
		op   Op
		want nvmeproto.Status
	}{
		{"read EIO", &faultSys{preadErr: unix.EIO}, OpRead, nvmeproto.StatusUnrecoveredReadError},
		{"write EIO", &faultSys{pwriteErr: unix.EIO}, OpWrite, nvmeproto.StatusWriteFault},
		{"write ENOSPC", &faultSys{pwriteErr: unix.ENOSPC}, OpWrite, nvmeproto.StatusCapacityExceeded.WithDNR()},
		{"write EDQUOT", &faultSys{pwriteErr: unix.EDQUOT}, OpWrite, nvmeproto.StatusCapacityExceeded.WithDNR()},
		{"write EROFS", &faultSys{pwriteErr: unix.EROFS}, OpWrite, nvmeproto.StatusNSWriteProtected.WithDNR()},
		{"flush EIO", &faultSys{fsyncErr: unix.EIO}, OpFlush, nvmeproto.StatusWriteFault.WithDNR()},
		{"flush ENOSPC", &faultSys{fsyncErr: unix.ENOSPC}, OpFlush, nvmeproto.StatusWriteFault.WithDNR()},
		{"read EBADF", &faultSys{preadErr: unix.EBADF}, OpRead, nvmeproto.StatusInternalError},
		// A write through the O_DSYNC descriptor syncs: its EIO may report earlier writes lost.
		{"FUA write EIO", &faultSys{pwriteErr: unix.EIO}, opFUAWrite, nvmeproto.StatusWriteFault.WithDNR()},
		// ... but lack of space refuses the write before anything is written or synced.
		{"FUA write ENOSPC", &faultSys{pwriteErr: unix.ENOSPC}, opFUAWrite, nvmeproto.StatusCapacityExceeded.WithDNR()},
		{"write zeroes FUA sync EIO", &faultSys{fsyncErr: unix.EIO}, opFUAWriteZeroes, nvmeproto.StatusWriteFault.WithDNR()},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "e"+string(rune('a'+i)))
			b := openTestFile(t, Spec{Path: path, Size: 1 << 20, sys: c.sys})
			r := &Request{Op: c.op, SLBA: 3, Buf: alignedBuf(4096)}
			switch c.op {
			case opFUAWrite:
				r.Op, r.FUA = OpWrite, true
			case opFUAWriteZeroes:
				r.Op, r.FUA, r.NLB, r.Buf = OpWriteZeroes, true, 8, nil
			}
			err := Execute(b, r)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			if s := Status(r.Op, err); s != c.want {
				t.Errorf("Status = %v, want %v (err %v)", s, c.want, err)
			}
		})
	}
	t.Run("truncated underneath", func(t *testing.T) {
		path := filepath.Join(dir, "trunc")
		b := openTestFile(t, Spec{Path: path, Size: 1 << 20})
		if err := os.Truncate(path, 4096); err != nil {
			t.Fatal(err)
		}
		err := b.ReadBlocks(alignedBuf(4096), 100)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("read past the shrunken file: %v, want io.ErrUnexpectedEOF", err)
		}
	})
}

// TestFileRejectsBlockDevice: a block device configured as a file gets a hint.
func TestFileRejectsBlockDevice(t *testing.T) {
	dev := ""
	for _, p := range []string{"/dev/loop0", "/dev/vda", "/dev/sda", "/dev/nvme0n1"} {
		if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0 {
			dev = p
			break
		}
	}
	if dev == "" {
		t.Skip("no block device node to point at")
	}
	_, err := Open(Spec{Kind: KindFile, Path: dev, Size: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), `use backend kind "block"`) {
		t.Errorf("Open(file, %s): %v, want a hint to use the block backend", dev, err)
	}
	_, err = Open(Spec{Kind: KindBlock, Path: filepath.Join(t.TempDir())})
	if err == nil || !strings.Contains(err.Error(), "not a block device") {
		t.Errorf("Open(block, directory): %v", err)
	}
}

// TestFileDIOAlignment: a filesystem whose direct I/O alignment (statx STATX_DIOALIGN)
// exceeds the lba size or the buffer alignment, or which reports none, gets buffered I/O.
func TestFileDIOAlignment(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		mem, off   uint32
		lba        uint32
		wantDirect bool
		why        string
	}{
		{512, 512, 512, true, ""},
		{4, 4096, 4096, true, ""},
		{4, 4096, 512, false, "offsets aligned to 4096"},
		{8192, 512, 4096, false, "buffers aligned to 8192"},
		{0, 0, 512, false, "no direct I/O support"},
	}
	for i, c := range cases {
		sys := &faultSys{dio: &[2]uint32{c.mem, c.off}}
		log, rec := testLogger(t)
		b := openTestFile(t, Spec{Path: filepath.Join(dir, "dio"+string(rune('a'+i))), Size: 1 << 20, LBASize: c.lba, Logger: log, sys: sys})
		if b.Info().Direct != c.wantDirect {
			t.Errorf("dio mem %d off %d, lba %d: Direct = %v, want %v", c.mem, c.off, c.lba, b.Info().Direct, c.wantDirect)
		}
		if fl := fdFlags(t, b.fd); (fl&unix.O_DIRECT != 0) != c.wantDirect {
			t.Errorf("dio mem %d off %d, lba %d: descriptor flags %#x", c.mem, c.off, c.lba, fl)
		}
		if c.why != "" && !rec.has(slog.LevelWarn, "cannot do O_DIRECT") {
			t.Errorf("dio mem %d off %d, lba %d: no warning; log:\n%s", c.mem, c.off, c.lba, rec)
		}
		if c.why != "" && !strings.Contains(rec.String(), c.why) {
			t.Errorf("warning does not say %q; log:\n%s", c.why, rec)
		}
		if err := b.WriteBlocks(alignedBuf(4096), 0, true); err != nil {
			t.Error(err)
		}
	}
}

// TestFileDIOAlignmentWithoutStatx: when statx does not report the direct I/O alignment
// (Linux before 6.1, or a filesystem that does not), the logical block size of the disk
// holding the file stands in for it, so a 512-byte namespace on a 4096-byte-sector disk
// gets buffered I/O instead of direct I/O the kernel refuses (EINVAL) for every block
// that is not 4096-aligned. Without a disk (size 0) direct I/O is kept.
func TestFileDIOAlignmentWithoutStatx(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		sector     uint32
		lba        uint32
		wantDirect bool
		why        string
	}{
		{4096, 512, false, "offsets aligned to 4096 bytes (the logical block size of the file's disk), more than the lba size 512; an lba size of 4096 keeps direct I/O"},
		{4096, 4096, true, ""},
		{512, 512, true, ""},
		{0, 512, true, ""},
	}
	for i, c := range cases {
		sector := c.sector
		sys := &faultSys{noDIO: true, sector: &sector}
		log, rec := testLogger(t)
		b := openTestFile(t, Spec{Path: filepath.Join(dir, "nostatx"+string(rune('a'+i))), Size: 1 << 20, LBASize: c.lba, Logger: log, sys: sys})
		if b.Info().Direct != c.wantDirect {
			t.Errorf("disk sector %d, lba %d: Direct = %v, want %v", c.sector, c.lba, b.Info().Direct, c.wantDirect)
		}
		if fl := fdFlags(t, b.fd); (fl&unix.O_DIRECT != 0) != c.wantDirect {
			t.Errorf("disk sector %d, lba %d: descriptor flags %#x", c.sector, c.lba, fl)
		}
		if warned := rec.has(slog.LevelWarn, "cannot do O_DIRECT"); warned != (c.why != "") {
			t.Errorf("disk sector %d, lba %d: warned %v, want %v; log:\n%s", c.sector, c.lba, warned, c.why != "", rec)
		}
		if c.why != "" && !strings.Contains(rec.String(), c.why) {
			t.Errorf("warning does not say %q; log:\n%s", c.why, rec)
		}
		// The second block: 512-byte aligned but not 4096-byte aligned when lba is 512.
		w := alignedBuf(int(c.lba))
		fill(w, byte(i+1))
		if err := b.WriteBlocks(w, 1, true); err != nil {
			t.Error(err)
		}
		r := alignedBuf(int(c.lba))
		if err := b.ReadBlocks(r, 1); err != nil || !bytes.Equal(r, w) {
			t.Errorf("disk sector %d, lba %d: read back: %v, data equal %v", c.sector, c.lba, err, bytes.Equal(r, w))
		}
	}
}

// TestSysfsSectorSize reads the logical block size from a sysfs laid out as the kernel
// does: a disk's queue directory, a partition without one (its disk's counts), a device
// sysfs does not know (a filesystem's anonymous device) and a value that is no block size.
func TestSysfsSectorSize(t *testing.T) {
	root := t.TempDir()
	write := func(rel, data string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, "dev/block"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, "dev/block", name)); err != nil {
			t.Fatal(err)
		}
	}
	write("devices/pci0/block/sda/queue/logical_block_size", "4096\n")
	write("devices/pci0/block/sda/sda1/partition", "1\n")
	write("devices/virtual/block/dm-0/queue/logical_block_size", "512\n")
	write("devices/virtual/block/odd/queue/logical_block_size", "1000\n")
	link("../../devices/pci0/block/sda", "8:0")
	link("../../devices/pci0/block/sda/sda1", "8:1")
	link("../../devices/virtual/block/dm-0", "253:0")
	link("../../devices/virtual/block/odd", "7:0")
	for _, c := range []struct {
		maj, min uint32
		want     uint32
		ok       bool
	}{
		{8, 0, 4096, true},
		{8, 1, 4096, true},
		{253, 0, 512, true},
		{0, 35, 0, false},
		{7, 0, 0, false},
	} {
		got, ok := sysfsSectorSize(root, unix.Mkdev(c.maj, c.min))
		if got != c.want || ok != c.ok {
			t.Errorf("device %d:%d: %d, %v; want %d, %v", c.maj, c.min, got, ok, c.want, c.ok)
		}
	}
}

// TestFileSyncFailureIsErrSync: a failed fdatasync (injected with the exported Faults, as
// the target's tests do) is ErrSync, Write Fault with DNR, and names the file. The kernel
// would let the next fdatasync succeed (it reports a writeback error once): the backend
// remembers the failure and fails every later flush without asking it, until reopened.
func TestFileSyncFailureIsErrSync(t *testing.T) {
	f := &Faults{}
	path := filepath.Join(t.TempDir(), "f")
	b := openTestFile(t, Spec{Path: path, Size: 1 << 20, Faults: f})
	if err := b.WriteBlocks(alignedBuf(4096), 0, false); err != nil {
		t.Fatal(err)
	}
	f.FailSyncs(unix.EIO)
	err := b.Flush()
	if !errors.Is(err, ErrSync) || !errors.Is(err, unix.EIO) || !strings.Contains(err.Error(), path) {
		t.Fatalf("flush with fdatasync failing: %v, want ErrSync wrapping EIO naming %s", err, path)
	}
	if st := Status(OpFlush, err); st != nvmeproto.StatusWriteFault.WithDNR() {
		t.Errorf("status %v, want Write Fault with DNR", st)
	}
	if err2 := b.Flush(); !errors.Is(err2, ErrSync) {
		t.Errorf("second flush: %v, want the first failure again (ErrSync)", err2)
	}
	if n := f.Syncs(); n != 1 {
		t.Errorf("%d fdatasync calls, want 1: a flush after a failure must not ask the kernel, which says all is well", n)
	}
	b.Close()
	b = openTestFile(t, Spec{Path: path, Size: 1 << 20, Faults: f})
	if err := b.Flush(); err != nil {
		t.Errorf("flush after reopening: %v", err)
	}
	f.FailWrites(unix.EIO, 1)
	if err := b.WriteBlocks(alignedBuf(4096), 0, false); !errors.Is(err, unix.EIO) || errors.Is(err, ErrSync) {
		t.Errorf("plain write failing with EIO: %v, want EIO and not ErrSync (the write itself failed; nothing completed was lost)", err)
	}
}

// TestExecuteFUASyncsZeroesAndDeallocate: with FUA (the target sets it when the host
// disabled the volatile write cache) write zeroes and deallocate are followed by an
// fdatasync; without it they are not.
func TestExecuteFUASyncsZeroesAndDeallocate(t *testing.T) {
	f := &Faults{}
	b := openTestFile(t, Spec{Path: filepath.Join(t.TempDir(), "f"), Size: 1 << 20, Faults: f})
	for _, c := range []struct {
		r     Request
		syncs int
	}{
		{Request{Op: OpWriteZeroes, SLBA: 8, NLB: 8}, 0},
		{Request{Op: OpWriteZeroes, SLBA: 8, NLB: 8, FUA: true}, 1},
		{Request{Op: OpDeallocate, SLBA: 8, NLB: 8}, 0},
		{Request{Op: OpDeallocate, SLBA: 8, NLB: 8, FUA: true}, 1},
		{Request{Op: OpDeallocate, Ranges: []Range{{0, 8}, {16, 8}}, FUA: true}, 1},
		{Request{Op: OpWrite, SLBA: 0, Buf: alignedBuf(4096), FUA: true}, 0}, // the O_DSYNC descriptor
	} {
		before := f.Syncs()
		if err := Execute(b, &c.r); err != nil {
			t.Fatalf("%v fua=%v: %v", c.r.Op, c.r.FUA, err)
		}
		if n := f.Syncs() - before; n != c.syncs {
			t.Errorf("%v fua=%v: %d fdatasync calls, want %d", c.r.Op, c.r.FUA, n, c.syncs)
		}
	}
}

// TestFileUsage: a sparse file reports what it has allocated, which grows with writes and
// shrinks with deallocate, never more than the namespace, and the filesystem's free space.
func TestFileUsage(t *testing.T) {
	b := openTestFile(t, Spec{Path: filepath.Join(t.TempDir(), "f"), Size: 8 << 20})
	if !Describe(b).ThinProvisioned {
		t.Fatal("file backend does not report thin provisioning")
	}
	var u Usager = b
	a0, avail, err := u.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if avail == 0 {
		t.Errorf("available 0 bytes on the test's filesystem")
	}
	if err := b.WriteBlocks(alignedBuf(1<<20), 0, false); err != nil {
		t.Fatal(err)
	}
	a1, _, err := u.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if a1 < a0+1<<20 || a1 > 8<<20 {
		t.Errorf("allocated %d bytes after writing 1 MiB to a file that had %d; want at least %d and at most the namespace", a1, a0, a0+1<<20)
	}
	if Describe(b).DeallocateReadsZeroes { // hole punching works here
		if err := b.Deallocate(0, 2048); err != nil {
			t.Fatal(err)
		}
		if a2, _, _ := u.Usage(); a2 >= a1 {
			t.Errorf("allocated %d bytes after deallocating the 1 MiB written, had %d", a2, a1)
		}
	}
}
