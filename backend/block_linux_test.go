package backend

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// testBlockDevice returns a block device for the block backend tests: the one
// GONVMF_TEST_BLOCKDEV names (its contents are destroyed), or a fresh loop device over a
// temporary file of size bytes with the given logical sector size when the test runs as
// root and the kernel has loop devices. The loop device detaches itself (autoclear) when
// the test's last descriptor closes. It skips the test when neither is available.
func testBlockDevice(t *testing.T, size int64, sector uint32) string {
	dev, _ := testBlockDeviceBacking(t, size, sector)
	return dev
}

// testBlockDeviceBacking is testBlockDevice that also returns the loop device's backing
// file ("" for GONVMF_TEST_BLOCKDEV).
func testBlockDeviceBacking(t *testing.T, size int64, sector uint32) (dev, backing string) {
	t.Helper()
	if dev := os.Getenv("GONVMF_TEST_BLOCKDEV"); dev != "" {
		t.Logf("using GONVMF_TEST_BLOCKDEV=%s", dev)
		return dev, ""
	}
	dev, backing, err := setupLoop(t, size, sector)
	if err != nil {
		t.Skipf("block backend tests need a block device: set GONVMF_TEST_BLOCKDEV to a scratch device, or run as root with loop device support (%v)", err)
	}
	return dev, backing
}

func setupLoop(t *testing.T, size int64, sector uint32) (dev, backing string, err error) {
	if os.Geteuid() != 0 {
		return "", "", errors.New("not root")
	}
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", "", fmt.Errorf("open /dev/loop-control: %w", err)
	}
	defer unix.Close(ctl)
	backing = filepath.Join(t.TempDir(), "loop.img")
	bf, err := os.Create(backing)
	if err != nil {
		return "", "", err
	}
	defer bf.Close()
	if err := bf.Truncate(size); err != nil {
		return "", "", err
	}
	for range 10 {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", "", fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev = fmt.Sprintf("/dev/loop%d", n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", "", fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(bf.Fd()), Size: sector}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], "gonvmf-backend-test")
		if err := unix.IoctlLoopConfigure(fd, &cfg); err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.EBUSY) { // someone took it between GET_FREE and here
				continue
			}
			return "", "", fmt.Errorf("LOOP_CONFIGURE %s: %w", dev, err)
		}
		// Hold a descriptor until the test ends: with autoclear, the device detaches
		// when the last one closes.
		t.Cleanup(func() { unix.Close(fd) })
		t.Logf("loop device %s over %s (%d bytes, %d-byte sectors)", dev, backing, size, sector)
		return dev, backing, nil
	}
	return "", "", errors.New("no free loop device")
}

func openTestBlock(t *testing.T, s Spec) *blockBackend {
	t.Helper()
	s.Kind = KindBlock
	if s.Logger == nil {
		s.Logger, _ = testLogger(t)
	}
	b, err := Open(s)
	if err != nil {
		t.Fatalf("Open(%+v): %v", s, err)
	}
	t.Cleanup(func() { b.Close() })
	return b.(*blockBackend)
}

func TestConformanceBlock(t *testing.T) {
	dev := testBlockDevice(t, 32<<20, 512)
	for _, lba := range []uint32{512, 4096} {
		t.Run(lbaName(lba), func(t *testing.T) {
			runConformance(t, func(t *testing.T, ro bool) Backend {
				log, _ := testLogger(t)
				b, err := Open(Spec{Kind: KindBlock, Path: dev, Size: conformanceSize, LBASize: lba, ReadOnly: ro, Logger: log})
				if errors.Is(err, unix.EINVAL) || err != nil && strings.Contains(err.Error(), "logical sector size") {
					t.Skipf("device cannot serve %d-byte blocks: %v", lba, err)
				}
				if err != nil {
					t.Fatal(err)
				}
				return b
			}, lba, kindTraits{persistent: true, reopen: true})
		})
	}
}

func TestBlockDevice(t *testing.T) {
	dev, backing := testBlockDeviceBacking(t, 32<<20, 512)
	sys := &faultSys{}
	b := openTestBlock(t, Spec{Path: dev, sys: sys})
	info := b.Info()
	if !info.Direct || info.Kind != KindBlock || info.DeallocateReadsZeroes {
		t.Errorf("Info() = %+v", info)
	}
	devBytes, err := unix.IoctlGetUint64(b.fd, unix.BLKGETSIZE64)
	if err != nil {
		t.Fatal(err)
	}
	lss, _ := unix.IoctlGetInt(b.fd, unix.BLKSSZGET)
	if b.LBASize() != uint32(lss) {
		t.Errorf("lba size 0 gave %d, want the logical sector size %d", b.LBASize(), lss)
	}
	if b.NumBlocks()*uint64(b.LBASize()) != devBytes&^uint64(lss-1) {
		t.Errorf("size 0: %d blocks, device is %d bytes", b.NumBlocks(), devBytes)
	}
	if fl := fdFlags(t, b.fd); fl&unix.O_DIRECT == 0 {
		t.Errorf("descriptor flags %#x lack O_DIRECT", fl)
	}
	if b.syncF == nil {
		t.Fatal("no O_DSYNC descriptor")
	}
	if fl := fdFlags(t, b.syncFD); fl&unix.O_DSYNC != unix.O_DSYNC || fl&unix.O_DIRECT == 0 {
		t.Errorf("FUA descriptor flags %#x, want O_DIRECT|O_DSYNC", fl)
	}

	// The exclusive claim keeps a second server (or a mount) off the device.
	if _, err := Open(Spec{Kind: KindBlock, Path: dev}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second open of %s: %v, want an 'in use' error", dev, err)
	}
	// A shared opener (a second target serving the device for high availability) makes
	// no exclusive claim, so it gets in.
	if sb, err := Open(Spec{Kind: KindBlock, Path: dev, Shared: true}); err != nil {
		t.Errorf("shared open of %s: %v", dev, err)
	} else {
		sb.Close()
	}

	w := alignedBuf(64 << 10)
	fill(w, 0x42)
	sys.reset()
	if err := b.WriteBlocks(w, 64, true); err != nil {
		t.Fatal(err)
	}
	if n := sys.count(func(c sysCall) bool { return c.name == "pwrite" && c.fd == b.syncFD }); n != 1 {
		t.Errorf("FUA write: %d pwrites on the O_DSYNC descriptor, want 1", n)
	}
	sys.reset()
	if err := b.WriteZeroes(64, 16); err != nil {
		t.Fatal(err)
	}
	if n := sys.count(func(c sysCall) bool { return c.name == "ioctl" && c.mode == unix.BLKZEROOUT && c.off == 64*int64(lss) }); n != 1 {
		t.Errorf("write zeroes: %d BLKZEROOUT calls at the right offset, want 1", n)
	}
	r := alignedBuf(len(w))
	if err := b.ReadBlocks(r, 64); err != nil {
		t.Fatal(err)
	}
	z := 16 * lss
	if !isZero(r[:z]) || !bytes.Equal(r[z:], w[z:]) {
		t.Error("BLKZEROOUT zeroed the wrong bytes")
	}
	// Discard reaches the device: a loop device punches the hole in its backing file.
	big := alignedBuf(4 << 20)
	fill(big, 3)
	if err := b.WriteBlocks(big, 8<<20/uint64(lss), false); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	var before int64
	if backing != "" {
		before = statBlocks(t, backing)
	}
	sys.reset()
	if err := b.Deallocate(8<<20/uint64(lss), 4<<20/uint64(lss)); err != nil {
		t.Fatal(err)
	}
	if n := sys.count(func(c sysCall) bool {
		return c.name == "ioctl" && c.mode == unix.BLKDISCARD && c.off == 8<<20 && c.n == 4<<20
	}); n != 1 {
		t.Errorf("deallocate: %d BLKDISCARD calls for the range, want 1", n)
	}
	if backing != "" {
		if after := statBlocks(t, backing); (before-after)*512 < 4<<20 {
			t.Errorf("backing file st_blocks %d -> %d after discarding 4 MiB", before, after)
		}
	}
	sys.reset()
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := sys.count(func(c sysCall) bool { return c.name == "fdatasync" }); n != 1 {
		t.Errorf("Flush: %d fdatasync calls, want 1", n)
	}
	if _, err := Open(Spec{Kind: KindBlock, Path: dev, Size: devBytes + 4096}); err == nil {
		t.Error("size larger than the device accepted")
	}
}

// TestBlockNoDiscard: a device without discard or zero-out support.
func TestBlockNoDiscard(t *testing.T) {
	dev := testBlockDevice(t, 32<<20, 512)
	sys := &faultSys{ioctlErr: map[uint]error{unix.BLKDISCARD: unix.EOPNOTSUPP, unix.BLKZEROOUT: unix.EOPNOTSUPP}}
	log, rec := testLogger(t)
	b := openTestBlock(t, Spec{Path: dev, Size: 8 << 20, LBASize: 4096, sys: sys, Logger: log})
	w := alignedBuf(8 * 4096)
	fill(w, 9)
	if err := b.WriteBlocks(w, 0, false); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.Deallocate(0, 4); err != nil {
			t.Fatalf("deallocate without discard: %v", err)
		}
	}
	if n := sys.count(func(c sysCall) bool { return c.name == "ioctl" && c.mode == unix.BLKDISCARD }); n != 1 {
		t.Errorf("%d BLKDISCARD attempts, want 1 (then remembered)", n)
	}
	if !rec.has(slog.LevelInfo, "does not support discard") {
		t.Errorf("no log line; log:\n%s", rec)
	}
	if err := b.WriteZeroes(2, 4); err != nil {
		t.Fatal(err)
	}
	if n := sys.count(func(c sysCall) bool { return c.name == "pwrite" && c.off == 2*4096 }); n != 1 {
		t.Errorf("write zeroes fallback: %d zero-buffer writes, want 1", n)
	}
	r := alignedBuf(len(w))
	if err := b.ReadBlocks(r, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r[:2*4096], w[:2*4096]) || !isZero(r[2*4096:6*4096]) || !bytes.Equal(r[6*4096:], w[6*4096:]) {
		t.Error("wrong data after the fallbacks")
	}
}

// TestBlockSectorSize: a 4 KiB-sector device refuses 512-byte blocks and defaults to 4 KiB.
func TestBlockSectorSize(t *testing.T) {
	if os.Getenv("GONVMF_TEST_BLOCKDEV") != "" {
		t.Skip("needs a 4 KiB-sector loop device, not GONVMF_TEST_BLOCKDEV")
	}
	dev := testBlockDevice(t, 16<<20, 4096)
	_, err := Open(Spec{Kind: KindBlock, Path: dev, LBASize: 512})
	if err == nil || !strings.Contains(err.Error(), "smaller than the logical sector size 4096") {
		t.Errorf("lba size 512 on a 4K device: %v", err)
	}
	b := openTestBlock(t, Spec{Path: dev})
	if b.LBASize() != 4096 || b.NumBlocks() != 4096 {
		t.Errorf("lba size %d, %d blocks; want 4096 and 4096", b.LBASize(), b.NumBlocks())
	}
}

func TestBlockRejectsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, make([]byte, 4096), 0o600)
	_, err := Open(Spec{Kind: KindBlock, Path: p})
	if err == nil || !strings.Contains(err.Error(), `use backend kind "file"`) {
		t.Errorf("Open(block, regular file): %v", err)
	}
}
