package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/urfave/cli/v2"
)

func discoverCommand() *cli.Command {
	return &cli.Command{
		Name:      "discover",
		Usage:     "print a target's discovery log page, like nvme discover",
		UsageText: "gonvmf discover -t rdma -a ADDRESS [-s PORT] [--hostnqn NQN] [--json]\n   gonvmf discover -t loop --config FILE",
		Description: `discover connects to the discovery controller (nqn.2014-08.org.nvmexpress.discovery,
or -n), reads the discovery log page (header, whole log, header again until the
generation counter is stable) and prints it as nvme-cli does, or as JSON.`,
		Flags: append(fabricsFlags(" (default: the discovery NQN)"),
			&cli.BoolFlag{Name: "json", Aliases: []string{"o"}, Usage: "print JSON"}),
		Action: func(c *cli.Context) error {
			o, s, err := fabricsOptions(c, nvmeproto.DiscoveryNQN, nil)
			if err != nil {
				return err
			}
			ctx, cancel := connectCtx(c)
			defer cancel()
			if err := dial(ctx, o, s); err != nil {
				return err
			}
			defer s.Close()
			l, err := s.ctrl.DiscoveryLog(ctx)
			if err != nil {
				return cli.Exit(fmt.Sprintf("reading the discovery log: %v", err), exitFailure)
			}
			if c.Bool("json") {
				return printDiscoveryJSON(c.App.Writer, l)
			}
			printDiscovery(c.App.Writer, l)
			return nil
		},
	}
}

// Names as nvme-cli prints them: libnvme looks every field up in a table indexed by the
// raw value and prints "unrecognized" for anything else (TREQ 6, "not required" with SQ
// flow control disable, included), so scripts that parse nvme discover can parse this.
func lookup(table map[uint8]string, v uint8) string {
	if s, ok := table[v]; ok {
		return s
	}
	return "unrecognized"
}

var (
	trtypeNames = map[uint8]string{uint8(nvmeproto.TrTypeRDMA): "rdma", uint8(nvmeproto.TrTypeFC): "fc",
		uint8(nvmeproto.TrTypeTCP): "tcp", uint8(nvmeproto.TrTypeIntraHost): "loop"}
	adrfamNames = map[uint8]string{uint8(nvmeproto.AdrFamPCI): "pci", uint8(nvmeproto.AdrFamIPv4): "ipv4",
		uint8(nvmeproto.AdrFamIPv6): "ipv6", uint8(nvmeproto.AdrFamIB): "infiniband", uint8(nvmeproto.AdrFamFC): "fibre-channel",
		uint8(nvmeproto.AdrFamIntraHost): "loop"}
	subtypeNames = map[uint8]string{uint8(nvmeproto.SubTypeReferral): "discovery subsystem referral",
		uint8(nvmeproto.SubTypeNVMe): "nvme subsystem", uint8(nvmeproto.SubTypeCurrentDiscovery): "current discovery subsystem"}
	treqNames = map[uint8]string{nvmeproto.TReqSecureChannelNotSpecified: "not specified",
		nvmeproto.TReqSecureChannelRequired: "required", nvmeproto.TReqSecureChannelNotRequired: "not required",
		nvmeproto.TReqDisableSQFlow: "not specified, sq flow control disable supported"}
	eflagsNames = map[uint8]string{0: "none", nvmeproto.EFlagEPCSD: "explicit discovery connections",
		nvmeproto.EFlagDupRetInfo:                        "duplicate discovery information",
		nvmeproto.EFlagEPCSD | nvmeproto.EFlagDupRetInfo: "explicit discovery connections, duplicate discovery information"}
	prtypeNames = map[uint8]string{nvmeproto.RDMAPrTypeNone: "not specified", nvmeproto.RDMAPrTypeIB: "infiniband",
		nvmeproto.RDMAPrTypeRoCE: "roce", nvmeproto.RDMAPrTypeRoCEv2: "roce-v2", nvmeproto.RDMAPrTypeIWARP: "iwarp"}
	qptypeNames = map[uint8]string{nvmeproto.RDMAQPTypeConnected: "connected", nvmeproto.RDMAQPTypeDatagram: "datagram"}
	cmsNames    = map[uint8]string{nvmeproto.RDMACMSRDMACM: "rdma-cm"}
)

func trtypeStr(t nvmeproto.TransportType) string  { return lookup(trtypeNames, uint8(t)) }
func adrfamStr(a nvmeproto.AddressFamily) string  { return lookup(adrfamNames, uint8(a)) }
func subtypeStr(s nvmeproto.SubsystemType) string { return lookup(subtypeNames, uint8(s)) }
func treqStr(t uint8) string                      { return lookup(treqNames, t) }
func prtypeStr(p uint8) string                    { return lookup(prtypeNames, p) }
func qptypeStr(q uint8) string                    { return lookup(qptypeNames, q) }
func cmsStr(c uint8) string                       { return lookup(cmsNames, c) }
func eflagsStr(f uint16) string {
	if f > 0xFF {
		return "unrecognized"
	}
	return lookup(eflagsNames, uint8(f))
}

// printDiscovery prints the log as nvme-cli's `nvme discover` does.
func printDiscovery(w io.Writer, l *nvmeproto.DiscoveryLog) {
	fmt.Fprintf(w, "\nDiscovery Log Number of Records %d, Generation counter %d\n", len(l.Entries), l.GenCtr)
	for i := range l.Entries {
		e := &l.Entries[i]
		fmt.Fprintf(w, "=====Discovery Log Entry %d======\n", i)
		fmt.Fprintf(w, "trtype:  %s\n", trtypeStr(e.TrType))
		fmt.Fprintf(w, "adrfam:  %s\n", adrfamStr(e.AdrFam))
		fmt.Fprintf(w, "subtype: %s\n", subtypeStr(e.SubType))
		fmt.Fprintf(w, "treq:    %s\n", treqStr(e.TReq))
		fmt.Fprintf(w, "portid:  %d\n", e.PortID)
		fmt.Fprintf(w, "trsvcid: %s\n", e.TrSvcID)
		fmt.Fprintf(w, "subnqn:  %s\n", e.SubNQN)
		fmt.Fprintf(w, "traddr:  %s\n", e.TrAddr)
		fmt.Fprintf(w, "eflags:  %s\n", eflagsStr(e.EFlags))
		if e.TrType == nvmeproto.TrTypeRDMA {
			r := e.RDMA()
			fmt.Fprintf(w, "rdma_prtype: %s\n", prtypeStr(r.PrType))
			fmt.Fprintf(w, "rdma_qptype: %s\n", qptypeStr(r.QPType))
			fmt.Fprintf(w, "rdma_cms:    %s\n", cmsStr(r.CMS))
			fmt.Fprintf(w, "rdma_pkey: 0x%04x\n", r.PKey)
		}
	}
}

// discoveryJSON follows nvme-cli's JSON output (-o json).
type discoveryJSON struct {
	GenCtr  uint64            `json:"genctr"`
	Records []discoveryRecord `json:"records"`
}

type discoveryRecord struct {
	TrType     string `json:"trtype"`
	AdrFam     string `json:"adrfam"`
	SubType    string `json:"subtype"`
	TReq       string `json:"treq"`
	PortID     uint16 `json:"portid"`
	TrSvcID    string `json:"trsvcid"`
	SubNQN     string `json:"subnqn"`
	TrAddr     string `json:"traddr"`
	EFlags     string `json:"eflags"`
	CNTLID     uint16 `json:"cntlid"`
	ASQSZ      uint16 `json:"asqsz"`
	RDMAPrType string `json:"rdma_prtype,omitempty"`
	RDMAQPType string `json:"rdma_qptype,omitempty"`
	RDMACMS    string `json:"rdma_cms,omitempty"`
	RDMAPKey   string `json:"rdma_pkey,omitempty"`
}

func printDiscoveryJSON(w io.Writer, l *nvmeproto.DiscoveryLog) error {
	out := discoveryJSON{GenCtr: l.GenCtr, Records: []discoveryRecord{}}
	for i := range l.Entries {
		e := &l.Entries[i]
		r := discoveryRecord{TrType: trtypeStr(e.TrType), AdrFam: adrfamStr(e.AdrFam), SubType: subtypeStr(e.SubType),
			TReq: treqStr(e.TReq), PortID: e.PortID, TrSvcID: e.TrSvcID, SubNQN: e.SubNQN, TrAddr: e.TrAddr,
			EFlags: eflagsStr(e.EFlags), CNTLID: e.CNTLID, ASQSZ: e.ASQSZ}
		if e.TrType == nvmeproto.TrTypeRDMA {
			t := e.RDMA()
			r.RDMAPrType, r.RDMAQPType, r.RDMACMS = prtypeStr(t.PrType), qptypeStr(t.QPType), cmsStr(t.CMS)
			r.RDMAPKey = fmt.Sprintf("0x%04x", t.PKey)
		}
		out.Records = append(out.Records, r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
