package nvmeproto

import (
	"bytes"
	"testing"
)

// Fuzz targets for every decoder of network input. Each checks that the decoder never
// panics and that whatever it accepts re-encodes to something it decodes identically.
// Seed corpora live in testdata/fuzz/<FuzzName>/ (regenerate with
// GONVMF_WRITE_CORPUS=1 go test -run TestWriteSeedCorpus ./nvmeproto).

func FuzzConnectData(f *testing.F) {
	for _, s := range seedConnectData() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d ConnectData
		if err := d.Unmarshal(b); err != nil {
			return
		}
		out := make([]byte, ConnectDataSize)
		d.Marshal(out)
		var d2 ConnectData
		if err := d2.Unmarshal(out); err != nil || d2 != d {
			t.Fatalf("re-decode: %+v vs %+v (%v)", d2, d, err)
		}
	})
}

func seedConnectData() [][]byte {
	d := ConnectData{HostID: [16]byte{0xde, 0xad}, CNTLID: CNTLIDDynamic,
		SubNQN: "nqn.2024-01.io.gonvmf:sub1", HostNQN: "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e"}
	b := make([]byte, ConnectDataSize)
	d.Marshal(b)
	bad := bytes.Clone(b)
	for i := 256; i < 512; i++ {
		bad[i] = 'a'
	}
	return [][]byte{b, bad, b[:100], nil}
}
