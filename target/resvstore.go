package target

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/nvmeproto"
)

// resvStore keeps the reservation state of namespaces with Persist Through Power Loss
// on in the configuration's state file (conf.Config.StateFile). The file is JSON: one
// record per namespace, keyed by subsystem NQN and NSID and carrying the namespace's
// UUID, so that a record never applies to another volume that took over the NSID.
// Records of namespaces the target does not serve are kept as they are.
//
// Every change is written crash-safely before the reservation command completes: a new
// file in the same directory, fsync, rename over the old one, fsync of the directory.
// One target at a time uses a state file: the store holds its lock (lockStateFile) from
// open — or, when there is no file yet, from its first write — to close.
type resvStore struct {
	path    string
	mu      sync.Mutex
	lock    *os.File               // nil: none taken (see lockStateFile)
	locked  bool                   // lockStateFile was called (and succeeded)
	current bool                   // recs were read with the lock held: the file holds nothing else
	recs    map[resvKey]resvRecord // what the file holds
	closed  bool
}

type resvKey struct {
	nqn  string
	nsid uint32
}

// resvFileVersion is the state file's format version.
const resvFileVersion = 1

type resvFile struct {
	Version      int          `json:"version"`
	Reservations []resvRecord `json:"reservations"`
}

type resvRecord struct {
	Subsystem   string          `json:"subsystem"`
	NSID        uint32          `json:"nsid"`
	UUID        string          `json:"uuid"`
	Generation  uint32          `json:"generation"`
	Type        uint8           `json:"type"`             // 0: no reservation; 1..6 as RTYPE
	Holder      string          `json:"holder,omitempty"` // host identifier, 32 hex digits
	Registrants []resvRegRecord `json:"registrants"`
}

type resvRegRecord struct {
	HostID string `json:"host_id"` // 32 hex digits
	Key    string `json:"key"`     // 0x-prefixed hex: JSON numbers do not hold 64 bits everywhere
}

// openResvStore reads the state file at path (a missing file is an empty one), taking
// its lock first if the file exists; a store without a file takes it before its first
// write (lockOnce), so that a target whose hosts never ask for Persist Through Power Loss
// leaves no lock file beside its configuration. The caller closes the store.
func openResvStore(path string) (*resvStore, error) {
	st := &resvStore{path: path, recs: map[resvKey]resvRecord{}}
	if _, err := os.Stat(path); err == nil {
		if err := st.lockOnce(); err != nil {
			return nil, err
		}
	}
	recs, err := readResvFile(path)
	if err != nil {
		st.close()
		return nil, err
	}
	st.recs, st.current = recs, st.locked
	return st, nil
}

// lockOnce takes the state file's lock if the store does not hold it yet. Called with
// st.mu held, or before the store is shared.
func (st *resvStore) lockOnce() error {
	if st.locked {
		return nil
	}
	lock, err := lockStateFile(st.path)
	if err != nil {
		return err
	}
	st.lock, st.locked = lock, true
	return nil
}

// readResvFile reads and checks a state file (a missing file is an empty one).
func readResvFile(path string) (map[resvKey]resvRecord, error) {
	recs := map[resvKey]resvRecord{}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return recs, nil
	}
	fix := "; repair it, or delete it to drop every reservation kept through power loss (with gonvmf stopped)"
	if err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	var f resvFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("state file %s: not valid: %v%s", path, err, fix)
	}
	if f.Version != resvFileVersion {
		return nil, fmt.Errorf("state file %s: version %d, this gonvmf reads version %d%s", path, f.Version, resvFileVersion, fix)
	}
	for i, r := range f.Reservations {
		if _, err := r.state(); err != nil {
			return nil, fmt.Errorf("state file %s: reservations[%d] (subsystem %q nsid %d): %v%s", path, i, r.Subsystem, r.NSID, err, fix)
		}
		k := resvKey{r.Subsystem, r.NSID}
		if _, dup := recs[k]; dup {
			return nil, fmt.Errorf("state file %s: reservations[%d]: subsystem %q nsid %d appears twice%s", path, i, r.Subsystem, r.NSID, fix)
		}
		recs[k] = r
	}
	return recs, nil
}

// lookup returns the persisted state of a namespace, or nil. A record whose UUID is not
// the namespace's is reported by mismatch and not used.
func (st *resvStore) lookup(nqn string, ns *namespace) (s *resvState, mismatch string) {
	st.mu.Lock()
	r, ok := st.recs[resvKey{nqn, ns.nsid}]
	st.mu.Unlock()
	if !ok {
		return nil, ""
	}
	if want := conf.FormatUUID(ns.cfg.UUID); !strings.EqualFold(r.UUID, want) {
		return nil, r.UUID
	}
	s, _ = r.state() // validated when read
	return s, ""
}

// close releases the state file's lock; put fails from then on.
func (st *resvStore) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return
	}
	st.closed = true
	if st.lock != nil {
		st.lock.Close()
	}
}

// errResvStoreClosed: a change after the target closed; another process may own the file.
var errResvStoreClosed = errors.New("the target is closed")

// put replaces (s non-nil) or removes the record of a namespace and rewrites the file;
// on error the file and the store are as before.
func (st *resvStore) put(nqn string, ns *namespace, s *resvState) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return fmt.Errorf("state file %s: %w", st.path, errResvStoreClosed)
	}
	if !st.current {
		// The file did not exist at start, and this store has written nothing: take the
		// lock, and start from what another target may have written since (until that
		// read succeeds, nothing is written: the records read at start were none).
		if err := st.lockOnce(); err != nil {
			return err
		}
		recs, err := readResvFile(st.path)
		if err != nil {
			return err
		}
		st.recs, st.current = recs, true
	}
	next := make(map[resvKey]resvRecord, len(st.recs)+1)
	for k, r := range st.recs {
		next[k] = r
	}
	k := resvKey{nqn, ns.nsid}
	if s != nil {
		next[k] = s.record(nqn, ns)
	} else {
		delete(next, k)
	}
	if renamed, err := st.write(next); err != nil {
		if renamed {
			// The new file is in place, but its rename is not known to be durable and the
			// command fails: put the store's records back, so that the file never holds a
			// change the host was told failed (and a later write does not drop it silently).
			if _, rerr := st.write(st.recs); rerr != nil {
				err = errors.Join(err, fmt.Errorf("state file %s: restoring the records before the change: %w", st.path, rerr))
			}
		}
		return err
	}
	st.recs = next
	return nil
}

// syncDir fsyncs a directory (a variable for tests).
var syncDir = func(d *os.File) error { return d.Sync() }

// write replaces the file with recs: temporary file, fsync, rename, fsync of the directory.
// renamed reports whether the new file took the old one's place (the error is then the
// directory's).
func (st *resvStore) write(recs map[resvKey]resvRecord) (renamed bool, err error) {
	f := resvFile{Version: resvFileVersion, Reservations: make([]resvRecord, 0, len(recs))}
	for _, r := range recs {
		f.Reservations = append(f.Reservations, r)
	}
	slices.SortFunc(f.Reservations, func(a, b resvRecord) int {
		if c := strings.Compare(a.Subsystem, b.Subsystem); c != 0 {
			return c
		}
		return int(int64(a.NSID) - int64(b.NSID))
	})
	data, err := json.MarshalIndent(&f, "", "  ")
	if err != nil {
		return false, err
	}
	data = append(data, '\n')
	dir := filepath.Dir(st.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(st.path)+".tmp*")
	if err != nil {
		return false, fmt.Errorf("state file %s: %w", st.path, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return false, fmt.Errorf("state file %s: writing %s: %w", st.path, tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return false, fmt.Errorf("state file %s: fsync of %s: %w", st.path, tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("state file %s: closing %s: %w", st.path, tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), st.path); err != nil {
		return false, fmt.Errorf("state file %s: %w", st.path, err)
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return true, fmt.Errorf("state file %s: opening its directory for fsync: %w", st.path, err)
	}
	defer d.Close()
	if err := syncDir(d); err != nil {
		return true, fmt.Errorf("state file %s: fsync of its directory: %w", st.path, err)
	}
	return true, nil
}

func (s *resvState) record(nqn string, ns *namespace) resvRecord {
	r := resvRecord{Subsystem: nqn, NSID: ns.nsid, UUID: conf.FormatUUID(ns.cfg.UUID), Generation: s.gen,
		Type: uint8(s.rtype), Registrants: []resvRegRecord{}}
	if s.rtype != nvmeproto.ResvNone && !s.rtype.AllRegistrants() {
		r.Holder = hex.EncodeToString(s.holder[:])
	}
	for _, g := range s.regs {
		r.Registrants = append(r.Registrants, resvRegRecord{HostID: hex.EncodeToString(g.host[:]), Key: fmt.Sprintf("%#x", g.key)})
	}
	return r
}

// state converts a record back, checking what a controller relies on: valid host
// identifiers and keys, a known type, a holder that is registered.
func (r *resvRecord) state() (*resvState, error) {
	s := &resvState{gen: r.Generation, ptpl: true, rtype: nvmeproto.ResvType(r.Type)}
	if s.rtype != nvmeproto.ResvNone && !s.rtype.Valid() {
		return nil, fmt.Errorf("type %d is not a reservation type (0..6)", r.Type)
	}
	hostID := func(h string) ([16]byte, error) {
		var id [16]byte
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != 16 {
			return id, fmt.Errorf("host identifier %q is not 32 hex digits", h)
		}
		copy(id[:], b)
		return id, nil
	}
	for _, g := range r.Registrants {
		id, err := hostID(g.HostID)
		if err != nil {
			return nil, err
		}
		key, err := strconv.ParseUint(g.Key, 0, 64)
		if err != nil {
			return nil, fmt.Errorf("key %q of host %s is not a 64-bit number", g.Key, g.HostID)
		}
		if s.reg(&id) >= 0 {
			return nil, fmt.Errorf("host %s is registered twice", g.HostID)
		}
		s.regs = append(s.regs, resvRegistrant{host: id, key: key})
	}
	switch {
	case s.rtype == nvmeproto.ResvNone:
	case s.rtype.AllRegistrants():
		if len(s.regs) == 0 {
			return nil, errors.New("an all-registrants reservation without registrants")
		}
	default:
		id, err := hostID(r.Holder)
		if err != nil {
			return nil, fmt.Errorf("holder: %v", err)
		}
		if s.reg(&id) < 0 {
			return nil, fmt.Errorf("holder %s is not registered", r.Holder)
		}
		s.holder = id
	}
	return s, nil
}

// resvPersist writes a namespace's new reservation state to the state file when PTPL is
// on before or after the change. Called with the namespace's nsResv.mu held.
func (t *Target) resvPersist(nqn string, ns *namespace, old, next *resvState) nvmeproto.Status {
	was, is := old != nil && old.ptpl, next != nil && next.ptpl
	if !was && !is || t.resv == nil {
		return nvmeproto.StatusSuccess
	}
	keep := next
	if !is {
		keep = nil
	}
	if err := t.resv.put(nqn, ns, keep); err != nil {
		t.log.Error("reservation not changed: cannot persist it", "subsystem", nqn, "nsid", ns.nsid, "err", err)
		return nvmeproto.StatusInternalError
	}
	return nvmeproto.StatusSuccess
}

// resvRestore gives a newly opened namespace its persisted reservation state.
func (s *subsystem) resvRestore(ns *namespace) {
	if s.t.resv == nil {
		return
	}
	st, mismatch := s.t.resv.lookup(s.nqn, ns)
	if mismatch != "" {
		s.t.log.Warn("state file: the persisted reservations of this NSID belong to another namespace (UUID differs); not restored",
			"file", s.t.resv.path, "subsystem", s.nqn, "nsid", ns.nsid, "uuid_in_file", mismatch, "uuid", conf.FormatUUID(ns.cfg.UUID))
		return
	}
	if st != nil {
		ns.resv.state.Store(st)
		s.t.log.Info("reservations restored (persist through power loss)", "subsystem", s.nqn, "nsid", ns.nsid,
			"registrants", len(st.regs), "type", st.rtype.String())
	}
}
