package initiator

import (
	"strings"
	"testing"

	"github.com/gonvmf/gonvmf/nvmeproto"
)

// TestUsableFormat: a namespace whose LBA format in use is not listed, or whose block is
// not 512 bytes to 64 KiB (a data size of 0 made every size and offset a division by
// zero), is left out by Rescan.
func TestUsableFormat(t *testing.T) {
	ns := func(flbas, nlbaf, lbads uint8) *nvmeproto.IdentifyNamespace {
		id := &nvmeproto.IdentifyNamespace{NSZE: 1 << 20, FLBAS: flbas, NLBAF: nlbaf}
		id.LBAF[flbas&nvmeproto.FLBASIndexMask].LBADS = lbads
		return id
	}
	for _, c := range []struct {
		id   *nvmeproto.IdentifyNamespace
		want string // "" usable
	}{
		{ns(0, 0, 9), ""},
		{ns(1, 1, 12), ""},
		{ns(0, 0, 16), ""},
		{ns(3, 0, 9), "formats 0..0 are listed"},
		{ns(0, 0, 0), "data size of 2^0"},
		{ns(0, 0, 4), "data size of 2^4"},
		{ns(0, 0, 17), "data size of 2^17"},
	} {
		err := usableFormat(c.id)
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("FLBAS %d, NLBAF %d, LBADS %d: %v, want %q", c.id.FLBAS, c.id.NLBAF, c.id.LBAF[c.id.FLBAS&nvmeproto.FLBASIndexMask].LBADS, err, c.want)
		}
	}
}
