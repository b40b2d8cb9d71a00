package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/urfave/cli/v2"
)

func init() { registerCommand(discoverCommand) }

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
			o, s, err := fabricsOptions(c, nvmeproto.DiscoveryNQN)
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

// Names as nvme-cli (libnvme) prints them.
func trtypeStr(t nvmeproto.TransportType) string {
	switch t {
	case nvmeproto.TrTypeRDMA:
		return "rdma"
	case nvmeproto.TrTypeFC:
		return "fc"
	case nvmeproto.TrTypeTCP:
		return "tcp"
	case nvmeproto.TrTypeIntraHost:
		return "loop"
	}
	return "unrecognized"
}

func adrfamStr(a nvmeproto.AddressFamily) string {
	switch a {
	case nvmeproto.AdrFamPCI:
		return "pci"
	case nvmeproto.AdrFamIPv4:
		return "ipv4"
	case nvmeproto.AdrFamIPv6:
		return "ipv6"
	case nvmeproto.AdrFamIB:
		return "infiniband"
	case nvmeproto.AdrFamFC:
		return "fibre-channel"
	case nvmeproto.AdrFamIntraHost:
		return "loop"
	}
	return "unrecognized"
}

func subtypeStr(s nvmeproto.SubsystemType) string {
	switch s {
	case nvmeproto.SubTypeReferral:
		return "discovery subsystem referral"
	case nvmeproto.SubTypeNVMe:
		return "nvme subsystem"
	case nvmeproto.SubTypeCurrentDiscovery:
		return "current discovery subsystem"
	}
	return "unrecognized"
}

func treqStr(t uint8) string {
	var s string
	switch t & nvmeproto.TReqSecureChannelMask {
	case nvmeproto.TReqSecureChannelNotSpecified:
		s = "not specified"
	case nvmeproto.TReqSecureChannelRequired:
		s = "required"
	case nvmeproto.TReqSecureChannelNotRequired:
		s = "not required"
	default:
		s = "unrecognized"
	}
	if t&nvmeproto.TReqDisableSQFlow != 0 {
		s += ", sq flow control disable supported"
	}
	return s
}

func eflagsStr(f uint16) string {
	var parts []string
	if f&nvmeproto.EFlagDupRetInfo != 0 {
		parts = append(parts, "duplicate returned information")
	}
	if f&nvmeproto.EFlagEPCSD != 0 {
		parts = append(parts, "explicit discovery connections")
	}
	if f&nvmeproto.EFlagNCC != 0 {
		parts = append(parts, "no cdc connectivity")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func prtypeStr(p uint8) string {
	switch p {
	case nvmeproto.RDMAPrTypeNone:
		return "not specified"
	case nvmeproto.RDMAPrTypeIB:
		return "infiniband"
	case nvmeproto.RDMAPrTypeRoCE:
		return "roce"
	case nvmeproto.RDMAPrTypeRoCEv2:
		return "roce-v2"
	case nvmeproto.RDMAPrTypeIWARP:
		return "iwarp"
	}
	return "unrecognized"
}

func qptypeStr(q uint8) string {
	switch q {
	case nvmeproto.RDMAQPTypeConnected:
		return "connected"
	case nvmeproto.RDMAQPTypeDatagram:
		return "datagram"
	}
	return "unrecognized"
}

func cmsStr(c uint8) string {
	if c == nvmeproto.RDMACMSRDMACM {
		return "rdma-cm"
	}
	return "unrecognized"
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
