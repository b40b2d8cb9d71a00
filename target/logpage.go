package target

import (
	"slices"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// discLSPPLEO is the discovery log LSP bit "port local entries only".
const discLSPPLEO = 1 << 0

// supportedLogs are the log pages of an I/O controller.
var supportedLogs = []nvmeproto.LID{
	nvmeproto.LIDSupportedLogPages, nvmeproto.LIDErrorInfo, nvmeproto.LIDSMART, nvmeproto.LIDFirmwareSlot,
	nvmeproto.LIDChangedNSList, nvmeproto.LIDCommandEffects, nvmeproto.LIDReservationNotify, nvmeproto.LIDANA,
}

// getLogPage implements Get Log Page: the page is built whole, then the requested range
// (offset and NUMD honoured) is copied out, zero-filled past its end. A read without RAE
// unmasks the page's asynchronous event before the page is built, so that a change that
// comes meanwhile is in the page or raises the event again, never neither.
func (c *controller) getLogPage(r *Request) nvmeproto.Status {
	var g nvmeproto.GetLogPageCommand
	g.FromCommand(&r.Cmd)
	if g.OT || g.Offset%4 != 0 { // offsets are bytes, dword aligned
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	if g.UUIDIndex != 0 {
		// A UUID index selects an entry of the UUID List, which this controller does not
		// have (CTRATT UUID List clear, Identify CNS 17h refused): no index names one.
		// (nvmet and SPDK ignore the field.)
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	n := g.Length()
	if n > uint64(c.t.mdtsBytes) {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	if !c.disc && (g.LID == nvmeproto.LIDChangedNSList || g.LID == nvmeproto.LIDReservationNotify) {
		return c.readConsumingLog(r, &g, n)
	}
	buf, st := c2h(r, int(n)) // before the unmask: a read refused for its length acknowledges nothing
	if st != nvmeproto.StatusSuccess {
		return st
	}
	if !g.RAE {
		c.logRead(g.LID)
	}
	page, st := c.logPage(g.LID, g.LSP, g.NSID)
	if st != nvmeproto.StatusSuccess {
		return st
	}
	size := uint64(len(page))
	if g.LID == nvmeproto.LIDANA && !c.disc {
		// The ANA log's length varies with the groups and namespaces; its size is the
		// largest it can be (NANAGRPID descriptors, MNAN NSIDs), which hosts that read it
		// in pieces (nvme-cli, 4 KiB at a time) may read up to: the rest reads as zeroes.
		size = max(size, conf.ANALogMaxSize)
	}
	if g.Offset > size {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	copyPage(buf, page, g.Offset)
	return nvmeproto.StatusSuccess
}

// copyPage copies page from offset into buf and zero-fills the rest of buf.
func copyPage(buf, page []byte, offset uint64) {
	k := 0
	if offset < uint64(len(page)) {
		k = copy(buf, page[offset:])
	}
	clear(buf[k:])
}

// readConsumingLog serves the two log pages that reading consumes: the Changed Namespace
// List is cleared, and the oldest Reservation Notification page is taken off its queue
// (with more waiting, a read without RAE raises the event again). Building, consuming and
// unmasking (without RAE) happen under one hold of c.mu, so that a change that comes
// meanwhile is either in the page the host gets or still there afterwards with its event
// raised, never consumed unread. Only a read that reaches the end of the page consumes
// it: an earlier piece returns the page as it stands, so that a host reading it in pieces
// (libnvme splits by its transfer size, RAE on all but the last) gets all of it. A read
// without RAE acknowledges the event, whichever piece it is. The Changed Namespace List
// is kept sorted, so a change between two pieces may land in a part already read: the
// last piece then leaves the list (consumed only if nothing changed since the piece at
// offset 0) and, acknowledging, raises the event again so that the host reads it anew.
func (c *controller) readConsumingLog(r *Request, g *nvmeproto.GetLogPageCommand, n uint64) nvmeproto.Status {
	size := nvmeproto.ChangedNSListSize
	if g.LID == nvmeproto.LIDReservationNotify {
		size = nvmeproto.ResvNotifyLogSize
	}
	page := make([]byte, size)
	if g.Offset > uint64(len(page)) {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	buf, st := c2h(r, int(n))
	if st != nvmeproto.StatusSuccess {
		return st
	}
	// The read reaches the end of the page: it is consumed (a read past the end, which
	// returns nothing of it, consumes nothing).
	whole := g.Offset < uint64(size) && g.Offset+n >= uint64(size)
	more := false
	c.mu.Lock()
	if g.LID == nvmeproto.LIDChangedNSList {
		nvmeproto.ChangedNSList(c.changedNS).Marshal(page)
		if g.Offset == 0 {
			c.changedSnap = c.changedGen
		}
		if whole {
			if c.changedSnap == c.changedGen {
				c.changedNS = nil
			} else {
				more = true // changed between the pieces: read it again
			}
		}
	} else if len(c.resvLog) > 0 {
		l := c.resvLog[0]
		l.Available = uint8(min(len(c.resvLog)-1, 255))
		l.Marshal(page)
		if whole {
			c.resvLog = slices.Delete(c.resvLog, 0, 1)
			more = len(c.resvLog) > 0
		}
	}
	if !g.RAE {
		c.unmaskLocked(g.LID)
	}
	c.mu.Unlock()
	copyPage(buf, page, g.Offset)
	if more && !g.RAE {
		if g.LID == nvmeproto.LIDChangedNSList {
			c.raiseEvent(eventNSChanged)
		} else {
			c.raiseEvent(eventResvLog)
		}
	}
	return nvmeproto.StatusSuccess
}

// logPage builds the whole log page lid, or returns the status for a page this controller
// does not have. The pages that reading consumes are readConsumingLog's.
func (c *controller) logPage(lid nvmeproto.LID, lsp uint8, nsid uint32) ([]byte, nvmeproto.Status) {
	if c.disc {
		if lid != nvmeproto.LIDDiscovery {
			return nil, nvmeproto.StatusInvalidLogPage.WithDNR()
		}
		return c.discoveryLog(lsp&discLSPPLEO != 0), nvmeproto.StatusSuccess
	}
	switch lid {
	case nvmeproto.LIDSupportedLogPages:
		var s nvmeproto.SupportedLogPages
		for _, l := range supportedLogs {
			s.Set(l, 0)
		}
		b := make([]byte, nvmeproto.SupportedLogPagesSize)
		s.Marshal(b)
		return b, nvmeproto.StatusSuccess
	case nvmeproto.LIDErrorInfo:
		return c.errorLog(), nvmeproto.StatusSuccess
	case nvmeproto.LIDSMART:
		return c.smartLog(nsid)
	case nvmeproto.LIDFirmwareSlot:
		f := nvmeproto.FirmwareSlotLog{AFI: 1, FRS: [7]string{FirmwareRevision}}
		b := make([]byte, nvmeproto.FirmwareSlotLogSize)
		f.Marshal(b)
		return b, nvmeproto.StatusSuccess
	case nvmeproto.LIDCommandEffects:
		b := make([]byte, nvmeproto.CommandEffectsLogSize)
		commandEffects.Marshal(b)
		return b, nvmeproto.StatusSuccess
	case nvmeproto.LIDANA: // LSP bits 7:1 are reserved
		return c.anaLog(lsp&nvmeproto.LSPANARGO != 0), nvmeproto.StatusSuccess
	}
	return nil, nvmeproto.StatusInvalidLogPage.WithDNR()
}

// discoveryLog builds the discovery log page for this controller's host: one entry per
// subsystem the host may access and advertised port (only the controller's own port with
// portLocal).
func (c *controller) discoveryLog(portLocal bool) []byte {
	t := c.t
	// Read the generation first: a change racing with this read bumps it again, so the
	// host, which compares GENCTR before and after reading the entries, retries.
	gen := t.genctr.Load()
	ports := t.advertised()
	t.mu.Lock()
	subs := make([]*subsystem, 0, len(t.order))
	subs = append(subs, t.order...)
	t.mu.Unlock()
	var entries []nvmeproto.DiscoveryLogEntry
	for _, p := range ports {
		if portLocal && p != c.port {
			continue
		}
		for _, s := range subs {
			if !s.allowed(c.hostNQN) {
				continue
			}
			e := nvmeproto.DiscoveryLogEntry{
				TrType:  nvmeproto.TransportType(p.cfg.TrType),
				AdrFam:  nvmeproto.AddressFamily(p.cfg.AdrFam),
				SubType: nvmeproto.SubTypeNVMe,
				// "Not specified" with SQ flow control disable, as the Linux target
				// reports: nvme-cli prints anything else with SQFLOW as "unrecognized".
				TReq:    nvmeproto.TReqDisableSQFlow,
				PortID:  p.id,
				CNTLID:  nvmeproto.CNTLIDDynamic,
				ASQSZ:   AdminQueueDepth,
				TrSvcID: p.cfg.TrSvcID,
				SubNQN:  s.nqn,
				TrAddr:  p.cfg.TrAddr,
			}
			if p.cfg.TrType == TrTypeRDMA {
				e.SetRDMA(nvmeproto.RDMATSAS{
					QPType: orDefault(p.cfg.RDMAQPType, nvmeproto.RDMAQPTypeConnected),
					PrType: orDefault(p.cfg.RDMAProviderType, nvmeproto.RDMAPrTypeNone),
					CMS:    orDefault(p.cfg.RDMACMS, nvmeproto.RDMACMSRDMACM),
					PKey:   p.cfg.RDMAPKey,
				})
			}
			entries = append(entries, e)
		}
	}
	page := make([]byte, nvmeproto.DiscoveryLogSize(len(entries)))
	h := nvmeproto.DiscoveryLogHeader{GenCtr: gen, NumRec: uint64(len(entries))}
	h.Marshal(page)
	for i := range entries {
		entries[i].Marshal(page[nvmeproto.DiscoveryLogSize(i):])
	}
	return page
}

func orDefault(v, def uint8) uint8 {
	if v == 0 {
		return def
	}
	return v
}

// errorLog returns the Error Information entries, newest first.
func (c *controller) errorLog() []byte {
	b := make([]byte, errorLogEntries*nvmeproto.ErrorInfoEntrySize)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i < errorLogEntries && uint64(i) < c.errCount; i++ {
		e := c.errLog[(c.errCount-uint64(i))%errorLogEntries]
		e.TrType = nvmeproto.TransportType(c.port.cfg.TrType)
		e.Marshal(b[i*nvmeproto.ErrorInfoEntrySize:])
	}
	return b
}

// smartLog returns the SMART / Health Information log for one namespace, or for the
// whole controller (NSID 0 or FFFFFFFFh): counters summed over the subsystem's namespaces.
//
// Composite Temperature is 0 K: a software target has no sensor, and a made-up value would
// pass for a real one. nvmet and SPDK report 0 too, and the Linux host's hwmon shows it as
// -273.15 °C. Identify WCTEMP and CCTEMP stay 0 to match, which keeps that host from
// creating temp1_max, temp1_min and temp1_crit: reading those needs the Temperature
// Threshold feature (04h), which this controller, like nvmet, does not implement.
func (c *controller) smartLog(nsid uint32) ([]byte, nvmeproto.Status) {
	var nss []*namespace
	if nsid == 0 || nsid == nvmeproto.NSIDAll {
		nss = c.subsys.namespaces()
	} else {
		ns := c.subsys.lookup(nsid) // once: the namespace may be removed meanwhile
		if ns == nil {
			return nil, nvmeproto.StatusInvalidNamespace.WithDNR()
		}
		nss = []*namespace{ns}
	}
	var rUnits, wUnits, rCmds, wCmds uint64
	for _, ns := range nss {
		rc, wc, ru, wu := ns.totals()
		rCmds, wCmds, rUnits, wUnits = rCmds+rc, wCmds+wc, rUnits+ru, wUnits+wu
	}
	c.mu.Lock()
	errs := c.errCount
	c.mu.Unlock()
	s := nvmeproto.SMARTLog{
		AvailableSpare:    100, // nothing wears out in a software target
		DataUnitsRead:     nvmeproto.DataUnits(rUnits * dataUnitBytes),
		DataUnitsWritten:  nvmeproto.DataUnits(wUnits * dataUnitBytes),
		HostReadCommands:  nvmeproto.U128(rCmds),
		HostWriteCommands: nvmeproto.U128(wCmds),
		PowerCycles:       nvmeproto.U128(1), // this target process
		PowerOnHours:      nvmeproto.U128(uint64(time.Since(c.t.started) / time.Hour)),
		NumErrLogEntries:  nvmeproto.U128(errs),
	}
	b := make([]byte, nvmeproto.SMARTLogSize)
	s.Marshal(b)
	return b, nvmeproto.StatusSuccess
}

// commandEffects is the Commands Supported and Effects log: every implemented command,
// with the effects a host must know about. No admin command changes what the controller
// reports about itself (CCC) or its namespaces: the features Set Features changes are
// host settings, not capabilities (as nvmet_get_cmd_effects_admin reports them). The
// Linux host logs "controller capabilities changed, reset may be required" after every
// passthrough command marked CCC.
var commandEffects = func() *nvmeproto.CommandEffectsLog {
	var l nvmeproto.CommandEffectsLog
	for _, op := range []uint8{nvmeproto.OpGetLogPage, nvmeproto.OpIdentify, nvmeproto.OpAbort,
		nvmeproto.OpSetFeatures, nvmeproto.OpGetFeatures, nvmeproto.OpAsyncEventRequest, nvmeproto.OpKeepAlive,
		nvmeproto.OpFabrics} {
		l.ACS[op] = nvmeproto.EffectCSUPP
	}
	for _, op := range []uint8{nvmeproto.OpRead, nvmeproto.OpCompare, nvmeproto.OpReservationRegister,
		nvmeproto.OpReservationReport, nvmeproto.OpReservationAcquire, nvmeproto.OpReservationRelease} {
		l.IOCS[op] = nvmeproto.EffectCSUPP
	}
	for _, op := range []uint8{nvmeproto.OpFlush, nvmeproto.OpWrite, nvmeproto.OpWriteZeroes, nvmeproto.OpDatasetManagement} {
		l.IOCS[op] = nvmeproto.EffectCSUPP | nvmeproto.EffectLBCC
	}
	l.IOCS[nvmeproto.OpFabrics] = nvmeproto.EffectCSUPP
	return &l
}()
