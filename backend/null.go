package backend

// nullBackend reads zeroes and drops writes. It checks ranges, buffers and read-only like
// a real backend, so a target benchmarked or tested against it takes the same paths.
type nullBackend struct {
	geometry
}

func openNull(s Spec) (Backend, error) {
	lba, shift, err := checkLBASize(s.LBASize, 512)
	if err != nil {
		return nil, err
	}
	n, err := checkSize(s.Kind, s.Size, lba)
	if err != nil {
		return nil, err
	}
	b := &nullBackend{}
	b.init(lba, shift, n, s.ReadOnly)
	return b, nil
}

func (b *nullBackend) ReadBlocks(buf []byte, slba uint64) error {
	if _, err := b.checkBuf(buf, slba); err != nil {
		return err
	}
	clear(buf)
	return nil
}

func (b *nullBackend) WriteBlocks(buf []byte, slba uint64, fua bool) error {
	_, err := b.checkWrite(buf, slba)
	return err
}

func (b *nullBackend) Flush() error                       { return nil }
func (b *nullBackend) Deallocate(slba, nlb uint64) error  { return b.checkModify(slba, nlb) }
func (b *nullBackend) WriteZeroes(slba, nlb uint64) error { return b.checkModify(slba, nlb) }
func (b *nullBackend) Close() error                       { return nil }

func (b *nullBackend) Info() Info {
	return Info{
		Kind:                  KindNull,
		DeallocateReadsZeroes: true,
		PhysicalBlockSize:     b.lbaSize,
		Inline:                true,
	}
}

// Resize sets the capacity; size 0 (the backing store's size) means no change.
func (b *nullBackend) Resize(size uint64) (uint64, error) {
	n, err := b.growTo(size)
	if err != nil {
		return 0, err
	}
	b.nblocks.Store(n)
	return n, nil
}
