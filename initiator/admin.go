package initiator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// GetLogPage reads len(p) bytes (a multiple of 4) of log page lid starting at byte
// offset off, in pieces no larger than the controller's transfer size.
func (c *Controller) GetLogPage(ctx context.Context, lid nvmeproto.LID, nsid uint32, off uint64, p []byte) error {
	if len(p) == 0 || len(p)%4 != 0 {
		return fmt.Errorf("initiator: log page read of %d bytes: want a positive multiple of 4", len(p))
	}
	step := min(c.pool.ChunkSize(), max(c.maxXfer, 4096))
	for done := 0; done < len(p); {
		n := min(step, len(p)-done)
		buf, err := c.pool.Get(ctx, n)
		if err != nil {
			return err
		}
		g := nvmeproto.GetLogPageCommand{NSID: nsid, LID: lid, Offset: off + uint64(done)}
		g.SetLength(uint64(n))
		err = c.adminData(ctx, "Get Log Page "+lid.String(), func(cmd *nvmeproto.Command) { g.ToCommand(cmd) }, buf, nvmeproto.DirCtrlToHost)
		if err == nil {
			copy(p[done:done+n], buf.Bytes())
		}
		buf.Release()
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

// DiscoveryLog reads the discovery log page (on a controller dialled with
// nvmeproto.DiscoveryNQN) as nvme discover does: the header, then the whole log, then
// the header again; if the generation counter changed meanwhile it starts over.
func (c *Controller) DiscoveryLog(ctx context.Context) (*nvmeproto.DiscoveryLog, error) {
	hdrBuf := make([]byte, nvmeproto.DiscoveryLogHeaderSize)
	for attempt := 0; attempt < 10; attempt++ {
		if err := c.GetLogPage(ctx, nvmeproto.LIDDiscovery, 0, 0, hdrBuf); err != nil {
			return nil, err
		}
		var h nvmeproto.DiscoveryLogHeader
		if err := h.Unmarshal(hdrBuf); err != nil {
			return nil, err
		}
		if h.NumRec > 1<<16 {
			return nil, fmt.Errorf("initiator: discovery log claims %d records", h.NumRec)
		}
		all := make([]byte, nvmeproto.DiscoveryLogSize(int(h.NumRec)))
		if err := c.GetLogPage(ctx, nvmeproto.LIDDiscovery, 0, 0, all); err != nil {
			return nil, err
		}
		// The header again: the log may have changed while it was read (in more than
		// one command when it is large), and only the counter read after says so.
		if err := c.GetLogPage(ctx, nvmeproto.LIDDiscovery, 0, 0, hdrBuf); err != nil {
			return nil, err
		}
		var h2, h3 nvmeproto.DiscoveryLogHeader
		if err := h2.Unmarshal(all); err != nil {
			return nil, err
		}
		if err := h3.Unmarshal(hdrBuf); err != nil {
			return nil, err
		}
		if h2.GenCtr != h.GenCtr || h2.NumRec != h.NumRec || h3.GenCtr != h.GenCtr || h3.NumRec != h.NumRec {
			continue
		}
		var l nvmeproto.DiscoveryLog
		if err := l.Unmarshal(all); err != nil {
			return nil, err
		}
		return &l, nil
	}
	return nil, errors.New("initiator: the discovery log kept changing while being read")
}

// IdentifyNamespace reads Identify Namespace (CNS 00h) of nsid.
func (c *Controller) IdentifyNamespace(ctx context.Context, nsid uint32) (*nvmeproto.IdentifyNamespace, error) {
	b, err := c.identifyRaw(ctx, nvmeproto.IdentifyCommand{NSID: nsid, CNS: nvmeproto.CNSNamespace})
	if err != nil {
		return nil, err
	}
	var ns nvmeproto.IdentifyNamespace
	if err := ns.Unmarshal(b); err != nil {
		return nil, fmt.Errorf("initiator: decoding Identify Namespace %d: %w", nsid, err)
	}
	return &ns, nil
}

// identifyRaw runs an Identify command and returns its 4096 bytes.
func (c *Controller) identifyRaw(ctx context.Context, ic nvmeproto.IdentifyCommand) ([]byte, error) {
	buf, err := c.pool.Get(ctx, nvmeproto.IdentifySize)
	if err != nil {
		return nil, err
	}
	defer buf.Release()
	name := "Identify (" + ic.CNS.String() + ")"
	if err := c.adminData(ctx, name, func(cmd *nvmeproto.Command) { ic.ToCommand(cmd) }, buf, nvmeproto.DirCtrlToHost); err != nil {
		return nil, err
	}
	return slices.Clone(buf.Bytes()), nil
}

// Rescan reads the active namespace list and each namespace's Identify data and
// identification descriptors, replacing what Namespaces returns.
func (c *Controller) Rescan(ctx context.Context) error {
	c.nsMu.Lock()
	defer c.nsMu.Unlock()
	var ids []uint32
	b, err := c.identifyRaw(ctx, nvmeproto.IdentifyCommand{CNS: nvmeproto.CNSActiveNSList})
	if err == nil {
		var l nvmeproto.NSIDList
		if err := l.Unmarshal(b); err != nil {
			return fmt.Errorf("initiator: decoding the active namespace list: %w", err)
		}
		ids = l
	} else {
		var se *StatusError
		if !errors.As(err, &se) {
			return err
		}
		// NVMe 1.0 controllers: try every NSID up to NN.
		for i := uint32(1); i <= min(c.id.NN, 1024); i++ {
			ids = append(ids, i)
		}
	}
	old := map[uint32]*Namespace{}
	if p := c.ns.Load(); p != nil {
		for _, ns := range *p {
			old[ns.NSID] = ns
		}
	}
	var list []*Namespace
	for _, nsid := range ids {
		id, err := c.IdentifyNamespace(ctx, nsid)
		if err != nil {
			return err
		}
		if id.NSZE == 0 {
			continue // inactive
		}
		if err := usableFormat(id); err != nil {
			// As the Linux host does with such a namespace: leave it out (every size and
			// offset would be computed from the block size).
			c.log.Warn("namespace left out: its LBA format is not usable", "nsid", nsid, "err", err)
			continue
		}
		ns := old[nsid]
		if ns == nil {
			ns = &Namespace{ctrl: c, NSID: nsid}
		}
		ns.set(id)
		if c.vs.Major() > 1 || c.vs.Minor() >= 3 || c.vs == 0 {
			if b, err := c.identifyRaw(ctx, nvmeproto.IdentifyCommand{NSID: nsid, CNS: nvmeproto.CNSNSDescriptorList}); err == nil {
				var d nvmeproto.NSDescriptorList
				if d.Unmarshal(b) == nil {
					ns.desc.Store(&d)
				}
			}
		}
		list = append(list, ns)
	}
	c.ns.Store(&list)
	return nil
}

// Namespaces returns the active namespaces found by the last scan (at Dial, after a
// namespace change notice, or by Rescan), by NSID.
func (c *Controller) Namespaces() []*Namespace {
	if p := c.ns.Load(); p != nil {
		return *p
	}
	return nil
}

// Namespace returns active namespace nsid.
func (c *Controller) Namespace(nsid uint32) (*Namespace, error) {
	for _, ns := range c.Namespaces() {
		if ns.NSID == nsid {
			return ns, nil
		}
	}
	return nil, fmt.Errorf("initiator: controller %d of %s has no active namespace %d", c.cntlid, c.opts.SubNQN, nsid)
}

// usableFormat checks the LBA format an Identify Namespace says is in use: one of those
// it lists, with a block of 512 bytes to 64 KiB.
func usableFormat(id *nvmeproto.IdentifyNamespace) error {
	i := id.FormatIndex()
	if i > int(id.NLBAF) {
		return fmt.Errorf("initiator: LBA format %d in use, but formats 0..%d are listed", i, id.NLBAF)
	}
	if ds := id.LBAF[i].LBADS; ds < 9 || ds > 16 {
		return fmt.Errorf("initiator: LBA format %d has a data size of 2^%d bytes; want 512 bytes to 64 KiB", i, ds)
	}
	return nil
}

// SetFeatures sets feature fid (value in CDW11) and returns completion dword 0.
func (c *Controller) SetFeatures(ctx context.Context, fid nvmeproto.FID, nsid, cdw11 uint32) (uint32, error) {
	sf := nvmeproto.SetFeaturesCommand{NSID: nsid, FID: fid, CDW11: cdw11}
	r, err := c.admin1(ctx, "Set Features ("+fid.String()+")", func(cmd *nvmeproto.Command) { sf.ToCommand(cmd) })
	if err != nil {
		return 0, err // r may still complete later: do not read it
	}
	return r.DW0, nil
}

// GetFeatures reads feature fid's current value (completion dword 0).
func (c *Controller) GetFeatures(ctx context.Context, fid nvmeproto.FID, nsid uint32) (uint32, error) {
	gf := nvmeproto.GetFeaturesCommand{NSID: nsid, FID: fid}
	r, err := c.admin1(ctx, "Get Features ("+fid.String()+")", func(cmd *nvmeproto.Command) { gf.ToCommand(cmd) })
	if err != nil {
		return 0, err
	}
	return r.DW0, nil
}
