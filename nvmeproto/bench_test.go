package nvmeproto

import "testing"

// Hot path: decode an SQE, view it as an I/O command, encode the CQE.
func BenchmarkIOCommandRoundTrip(b *testing.B) {
	sq := make([]byte, SQESize)
	(&Command{Opcode: OpRead, CID: 1, NSID: 1, CDW10: 100, CDW12: 7,
		SGL: SGLDescriptor{Type: SGLTypeKeyedDataBlock, Address: 0x1000, Length: 4096, Key: 9}}).Marshal(sq)
	cq := make([]byte, CQESize)
	var c Command
	var rw RWCommand
	var r Completion
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Unmarshal(sq); err != nil {
			b.Fatal(err)
		}
		rw.FromCommand(&c)
		r = Completion{CID: c.CID, SQHD: uint16(rw.NLB), Status: StatusSuccess}
		r.Marshal(cq)
	}
}

func BenchmarkIdentifyControllerMarshal(b *testing.B) {
	id := IdentifyController{SN: "serial", MN: "model", FR: "1.0", SubNQN: "nqn.2024-01.io.gonvmf:s", SGLS: SGLSSupported | SGLSKeyedDataBlock}
	buf := make([]byte, IdentifySize)
	b.ReportAllocs()
	for b.Loop() {
		id.Marshal(buf)
	}
}
