package target

import (
	"time"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// Feature identifiers this target implements.
const (
	fidArbitration = nvmeproto.FIDArbitration
	fidPowerMgmt   = nvmeproto.FIDPowerManagement
	fidVWC         = nvmeproto.FIDVolatileWriteCache
	fidNumQueues   = nvmeproto.FIDNumberOfQueues
	fidAsyncEvent  = nvmeproto.FIDAsyncEventConfig
	fidTimestamp   = nvmeproto.FIDTimestamp
	fidKeepAlive   = nvmeproto.FIDKeepAliveTimer
	fidHostID      = nvmeproto.FIDHostIdentifier
	fidResvMask    = nvmeproto.FIDReservationMask
	fidResvPersist = nvmeproto.FIDReservationPersist
	fidHostBehav   = nvmeproto.FIDHostBehaviorSupport
)

// featureSupported reports whether the controller implements a feature.
func (c *controller) featureSupported(fid nvmeproto.FID) bool {
	switch fid {
	case fidKeepAlive, fidAsyncEvent:
		return true
	case fidArbitration, fidPowerMgmt, fidNumQueues, fidTimestamp, fidHostID, fidResvMask, fidResvPersist, fidVWC,
		fidHostBehav:
		return !c.disc
	}
	return false
}

// dataLen checks that a feature command moves exactly n bytes.
func dataLen(r *Request, n int) nvmeproto.Status {
	if int(r.Length) != n {
		return nvmeproto.StatusDataSGLLengthInvalid.WithDNR()
	}
	return nvmeproto.StatusSuccess
}

// setFeatures implements Set Features.
func (c *controller) setFeatures(r *Request) nvmeproto.Status {
	var sf nvmeproto.SetFeaturesCommand
	sf.FromCommand(&r.Cmd)
	fid, v := sf.FID, sf.CDW11
	if !c.featureSupported(fid) {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	if sf.SV {
		return nvmeproto.StatusFeatureNotSaveable.WithDNR()
	}
	if fid == fidHostID {
		// Over Fabrics the host identifier comes from Connect and cannot change, whatever
		// data the command carries (16 bytes with EXHID).
		return nvmeproto.StatusCommandSequenceError.WithDNR()
	}
	want := 0
	switch fid {
	case fidTimestamp:
		want = nvmeproto.TimestampSize
	case fidHostBehav:
		want = nvmeproto.HostBehaviorSize
	}
	if st := dataLen(r, want); st != nvmeproto.StatusSuccess {
		return st
	}
	switch fid {
	case fidResvMask:
		return c.setResvMask(sf.NSID, v)
	case fidResvPersist:
		return c.setResvPersistFeature(sf.NSID, v)
	case fidHostBehav:
		return c.setHostBehavior(r.Data[:nvmeproto.HostBehaviorSize])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch fid {
	case fidArbitration:
		c.arbitration = v
	case fidPowerMgmt:
		if nvmeproto.PowerManagement(v).PS() != 0 { // one power state (NPSS 0)
			return nvmeproto.StatusInvalidField.WithDNR()
		}
		c.powerMgmt = v
	case fidVWC:
		c.wce.Store(nvmeproto.VolatileWriteCache(v).WCE())
	case fidNumQueues:
		nq := nvmeproto.NumQueues(v)
		nsqr, ncqr := uint32(nq.NSQ()), uint32(nq.NCQ())
		if nsqr == 0xFFFF || ncqr == 0xFFFF {
			return nvmeproto.StatusInvalidField.WithDNR()
		}
		if len(c.liveQueues(1)) > 0 {
			return nvmeproto.StatusCommandSequenceError.WithDNR()
		}
		// No more than the host has left of limits.max_queues_per_host (its queues
		// connected now include this controller's admin queue), and at least one: the
		// field cannot say none.
		limit := uint32(max(min(c.t.tr.MaxIOQueues, c.t.hostQueuesLeft(c.hostNQN)), 1))
		nsqa, ncqa := min(nsqr+1, limit), min(ncqr+1, limit)
		c.ioQueues = int(min(nsqa, ncqa))
		c.numQueues = uint32(nvmeproto.MakeNumQueues(uint16(nsqa-1), uint16(ncqa-1)))
		r.CQE.DW0 = c.numQueues
	case fidAsyncEvent:
		if v&^c.settableAEC() != 0 {
			// A notice the controller cannot raise (not in OAES) or a reserved bit: refused,
			// as nvmet_set_feat_async_event does, rather than enabled in name only.
			return nvmeproto.StatusInvalidField.WithDNR()
		}
		c.aec = v
	case fidKeepAlive:
		c.startKeepAlive(c.t.keepAlive(v))
	case fidTimestamp:
		var ts nvmeproto.Timestamp
		ts.Unmarshal(r.Data[:nvmeproto.TimestampSize]) // cannot fail: the length was checked
		c.tsBase, c.tsAt, c.tsSet = ts.Millis, time.Now(), true
	}
	return nvmeproto.StatusSuccess
}

// getFeatures implements Get Features with SEL current, default, saved (= default: no
// feature is saveable) and supported capabilities.
func (c *controller) getFeatures(r *Request) nvmeproto.Status {
	var gf nvmeproto.GetFeaturesCommand
	gf.FromCommand(&r.Cmd)
	fid, sel := gf.FID, gf.SEL
	if !c.featureSupported(fid) || sel > nvmeproto.SelSupportedCap {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	want := 0
	if sel != nvmeproto.SelSupportedCap {
		switch fid {
		case fidTimestamp:
			want = nvmeproto.TimestampSize
		case fidHostBehav:
			want = nvmeproto.HostBehaviorSize
		case fidHostID:
			if gf.CDW11&nvmeproto.HostIDEXHID == 0 { // only the 128-bit host identifier exists over Fabrics
				return nvmeproto.StatusInvalidField.WithDNR()
			}
			want = nvmeproto.HostIDExtendedLen
		}
	}
	if st := dataLen(r, want); st != nvmeproto.StatusSuccess {
		return st
	}
	if sel == nvmeproto.SelSupportedCap {
		switch fid {
		case fidHostID:
		case fidResvMask, fidResvPersist:
			r.CQE.DW0 = nvmeproto.FeatureCapChangeable | nvmeproto.FeatureCapNSSpecific
		default:
			r.CQE.DW0 = nvmeproto.FeatureCapChangeable
		}
		return nvmeproto.StatusSuccess
	}
	def := sel != nvmeproto.SelCurrent
	if fid == fidResvMask || fid == fidResvPersist {
		return c.getResvFeature(r, fid, gf.NSID, def)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch fid {
	case fidArbitration:
		if !def {
			r.CQE.DW0 = c.arbitration
		}
	case fidPowerMgmt:
		if !def {
			r.CQE.DW0 = c.powerMgmt
		}
	case fidVWC:
		if def || c.wce.Load() {
			r.CQE.DW0 = 1
		}
	case fidNumQueues:
		if !def && c.numQueues != 0 { // what the Set completion said was allocated
			r.CQE.DW0 = c.numQueues
			break
		}
		n := uint32(c.t.tr.MaxIOQueues)
		if !def {
			n = uint32(c.ioQueues)
		}
		r.CQE.DW0 = uint32(nvmeproto.MakeNumQueues(uint16(n-1), uint16(n-1)))
	case fidAsyncEvent:
		if def {
			r.CQE.DW0 = c.supportedAEC()
		} else {
			r.CQE.DW0 = c.aec
		}
	case fidKeepAlive:
		if !def {
			r.CQE.DW0 = uint32(c.kato / time.Millisecond)
		}
	case fidTimestamp:
		ms, set := c.timestamp(time.Now())
		ts := nvmeproto.Timestamp{Millis: ms & (1<<48 - 1), Origin: nvmeproto.TimestampOriginReset}
		if set {
			ts.Origin = nvmeproto.TimestampOriginHost
		}
		ts.Marshal(r.Data[:nvmeproto.TimestampSize])
	case fidHostID:
		copy(r.Data[:nvmeproto.HostIDExtendedLen], c.hostID[:])
	case fidHostBehav:
		var hb nvmeproto.HostBehavior
		if !def && c.acre.Load() {
			hb.ACRE = nvmeproto.HostBehaviorEnable
		}
		hb.Marshal(r.Data[:nvmeproto.HostBehaviorSize])
	}
	return nvmeproto.StatusSuccess
}

// setHostBehavior implements Set Features Host Behavior Support (16h) with its 512-byte
// data. ACRE is 0 or 1: with 1 a status the host may retry carries the Command Retry
// Delay (see controller.unavailable). The other fields concern what this controller does
// not advertise (ETDAS: telemetry data area 4, LPA bit 6; LBAFEE: extended LBA formats,
// CTRATT ELBAS; HDISNS: dispersed namespaces; CDFE: Copy descriptor formats), so they
// must be 0. A reserved or unsupported value is Invalid Field in Command and changes
// nothing. Bytes 6..511 are reserved and not checked: a field a later revision defines
// there is one a host enables only where the controller advertises it.
func (c *controller) setHostBehavior(data []byte) nvmeproto.Status {
	var hb nvmeproto.HostBehavior
	hb.Unmarshal(data) // cannot fail: the length was checked
	if hb.ACRE > nvmeproto.HostBehaviorEnable || hb.ETDAS != 0 || hb.LBAFEE != 0 || hb.HDISNS != 0 || hb.CDFE != 0 {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	c.acre.Store(hb.ACRE == nvmeproto.HostBehaviorEnable)
	return nvmeproto.StatusSuccess
}

// asyncEventRequest holds an Asynchronous Event Request until an event happens, or
// completes it at once with an event raised while none was outstanding.
func (c *controller) asyncEventRequest(q *Queue, r *Request) {
	if r.Length != 0 {
		q.reject(r, nvmeproto.StatusDataSGLLengthInvalid.WithDNR(), "admin command failed")
		return
	}
	c.mu.Lock()
	if c.dead { // the admin queue is closing: nothing will ever complete it otherwise
		c.mu.Unlock()
		q.finish(r, nvmeproto.StatusAbortSQDeletion)
		return
	}
	if len(c.events) > 0 {
		ev := c.events[0]
		c.events = c.events[1:]
		c.mu.Unlock()
		r.CQE.DW0 = uint32(ev.ae)
		q.finish(r, nvmeproto.StatusSuccess)
		return
	}
	if len(c.aers) >= aerLimit {
		c.mu.Unlock()
		q.reject(r, nvmeproto.StatusAERLimitExceeded.WithDNR(), "asynchronous event request limit exceeded")
		return
	}
	c.aers = append(c.aers, r)
	c.mu.Unlock()
}

// abort implements Abort: held Asynchronous Event Requests can be aborted; anything else,
// executing or queued for the admin worker, runs to completion (DW0 bit 0 set: not
// aborted).
func (c *controller) abort(r *Request) nvmeproto.Status {
	sqid, cid := uint16(r.Cmd.CDW10), uint16(r.Cmd.CDW10>>16)
	r.CQE.DW0 = 1
	if sqid != 0 {
		return nvmeproto.StatusSuccess
	}
	c.mu.Lock()
	var victim *Request
	for i, a := range c.aers {
		if a.Cmd.CID == cid {
			victim = a
			c.aers = append(c.aers[:i:i], c.aers[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	if victim != nil {
		r.CQE.DW0 = 0
		victim.q.finish(victim, nvmeproto.StatusAbortRequested)
	}
	return nvmeproto.StatusSuccess
}

// resvFeatureNS returns the namespace a namespace specific feature names, or the status
// for an NSID that names none (FFFFFFFFh, all namespaces, only where all is set).
func (c *controller) resvFeatureNS(nsid uint32, all bool) (*namespace, nvmeproto.Status) {
	if nsid == nvmeproto.NSIDAll && all {
		return nil, nvmeproto.StatusSuccess
	}
	ns := c.subsys.lookup(nsid)
	if ns == nil || ns.closing() {
		return nil, c.unavailable(ns)
	}
	return ns, nvmeproto.StatusSuccess
}

// setResvMask implements Set Features Reservation Notification Mask (82h): for one
// namespace, or with NSID FFFFFFFFh for all.
func (c *controller) setResvMask(nsid, v uint32) nvmeproto.Status {
	if v&^nvmeproto.ResvMaskAll != 0 {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	ns, st := c.resvFeatureNS(nsid, true)
	if st != nvmeproto.StatusSuccess {
		return st
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ns == nil {
		c.resvMaskAll, c.resvMask = v, nil
		return nvmeproto.StatusSuccess
	}
	if c.resvMask == nil {
		c.resvMask = map[uint32]uint32{}
	}
	c.resvMask[ns.nsid] = v
	return nvmeproto.StatusSuccess
}

// setResvPersistFeature implements Set Features Reservation Persistence (83h): CDW11 bit
// 0 is the new PTPL state of one namespace, or with NSID FFFFFFFFh of all.
func (c *controller) setResvPersistFeature(nsid, v uint32) nvmeproto.Status {
	if v&^nvmeproto.ResvPersistPTPL != 0 {
		return nvmeproto.StatusInvalidField.WithDNR()
	}
	ns, st := c.resvFeatureNS(nsid, true)
	if st != nvmeproto.StatusSuccess {
		return st
	}
	ptpl := v&nvmeproto.ResvPersistPTPL != 0
	if ns != nil {
		return c.setResvPersist(ns, ptpl)
	}
	for _, ns := range c.subsys.namespaces() {
		if !ns.acquire() {
			continue
		}
		st := c.setResvPersist(ns, ptpl)
		ns.release()
		if st != nvmeproto.StatusSuccess {
			return st
		}
	}
	return nvmeproto.StatusSuccess
}

// getResvFeature implements Get Features of 82h and 83h for one namespace.
func (c *controller) getResvFeature(r *Request, fid nvmeproto.FID, nsid uint32, def bool) nvmeproto.Status {
	ns, st := c.resvFeatureNS(nsid, false)
	if st != nvmeproto.StatusSuccess {
		return st
	}
	if def {
		return nvmeproto.StatusSuccess
	}
	if fid == fidResvPersist {
		if s := ns.resv.state.Load(); s != nil && s.ptpl {
			r.CQE.DW0 = nvmeproto.ResvPersistPTPL
		}
		return nvmeproto.StatusSuccess
	}
	c.mu.Lock()
	r.CQE.DW0 = c.resvMaskOf(ns.nsid)
	c.mu.Unlock()
	return nvmeproto.StatusSuccess
}
