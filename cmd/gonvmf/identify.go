package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/dustin/go-humanize"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/nvmeproto"
	"github.com/urfave/cli/v2"
)

func identifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "identify",
		Usage:     "connect to a controller and print its Identify Controller data and namespaces",
		UsageText: "gonvmf identify -t rdma -a ADDRESS [-s PORT] -n NQN [--hostnqn NQN] [--nsid N] [--json]\n   gonvmf identify -t loop --config FILE [-n NQN]",
		Description: `identify connects to the controller of subsystem NQN (-n), prints the key fields of
Identify Controller as nvme id-ctrl names them, the ANA group states this controller
reports (its listener's, from the ANA log page), then every active namespace (or only
--nsid) with its size, LBA formats and identifiers as nvme id-ns does, and disconnects
(shutting the controller down). --json prints the same as one JSON object.`,
		Flags: append(fabricsFlags(" (with -t loop: default the configuration's first subsystem)"),
			&cli.UintFlag{Name: "nsid", DefaultText: "all", Usage: "print only namespace `NSID`"},
			&cli.BoolFlag{Name: "json", Aliases: []string{"o"}, Usage: "print JSON"}),
		Action: func(c *cli.Context) error {
			o, s, err := fabricsOptions(c, "", nil)
			if err != nil {
				return err
			}
			o.Queues = 1
			ctx, cancel := connectCtx(c)
			defer cancel()
			if err := dial(ctx, o, s); err != nil {
				return err
			}
			defer s.Close()
			nss := s.ctrl.Namespaces()
			if n := c.Uint("nsid"); n != 0 {
				ns, err := s.ctrl.Namespace(uint32(n))
				if err != nil {
					return cli.Exit(err.Error(), exitFailure)
				}
				nss = []*initiator.Namespace{ns}
			}
			groups, err := anaGroups(ctx, s.ctrl)
			if err != nil {
				return cli.Exit(err.Error(), exitFailure)
			}
			if c.Bool("json") {
				return printIdentifyJSON(c.App.Writer, s.ctrl, groups, nss)
			}
			printIdentify(c.App.Writer, s.ctrl, groups, nss)
			return nil
		},
	}
}

// field is one named value as nvme-cli prints it.
type field struct {
	name string
	val  any // JSON value
	text string
}

func hexf(name string, v any) field { return field{name, v, fmt.Sprintf("%#x", v)} }
func decf(name string, v any) field { return field{name, v, fmt.Sprint(v)} }
func strf(name, v string) field     { return field{name, v, v} }

func ctrlFields(c *initiator.Controller) []field {
	id := c.Identify()
	return []field{
		hexf("vid", id.VID), hexf("ssvid", id.SSVID), strf("sn", id.SN), strf("mn", id.MN), strf("fr", id.FR),
		decf("rab", id.RAB), strf("ieee", fmt.Sprintf("%02x%02x%02x", id.IEEE[2], id.IEEE[1], id.IEEE[0])),
		hexf("cmic", id.CMIC), decf("mdts", id.MDTS), hexf("cntlid", id.CNTLID), hexf("ver", uint32(id.VER)),
		decf("rtd3r", id.RTD3R), decf("rtd3e", id.RTD3E), hexf("oaes", id.OAES), hexf("ctratt", id.CTRATT),
		decf("cntrltype", id.CNTRLTYPE), hexf("oacs", id.OACS), decf("acl", id.ACL), decf("aerl", id.AERL),
		hexf("frmw", id.FRMW), hexf("lpa", id.LPA), decf("elpe", id.ELPE), decf("npss", id.NPSS),
		decf("kas", id.KAS), decf("anatt", id.ANATT), decf("anacap", id.ANACAP), decf("anagrpmax", id.ANAGRPMAX),
		decf("nanagrpid", id.NANAGRPID), hexf("sqes", id.SQES), hexf("cqes", id.CQES), decf("maxcmd", id.MAXCMD),
		decf("nn", id.NN), hexf("oncs", id.ONCS), hexf("fuses", id.FUSES), hexf("fna", id.FNA), hexf("vwc", id.VWC),
		decf("awun", id.AWUN), decf("awupf", id.AWUPF), hexf("sgls", id.SGLS), decf("mnan", id.MNAN),
		strf("subnqn", id.SubNQN), decf("ioccsz", id.IOCCSZ), decf("iorcsz", id.IORCSZ), decf("icdoff", id.ICDOFF),
		hexf("fcatt", id.FCATT), decf("msdbd", id.MSDBD), hexf("ofcs", id.OFCS),
	}
}

func nsFields(ns *initiator.Namespace) []field {
	id := ns.Identify()
	f := []field{
		hexf("nsze", id.NSZE), hexf("ncap", id.NCAP), hexf("nuse", id.NUSE), hexf("nsfeat", id.NSFEAT),
		decf("nlbaf", id.NLBAF), hexf("flbas", id.FLBAS), hexf("mc", id.MC), hexf("dpc", id.DPC), hexf("dps", id.DPS),
		hexf("nmic", id.NMIC), hexf("rescap", id.RESCAP), hexf("fpi", id.FPI), hexf("dlfeat", id.DLFEAT),
		decf("nawun", id.NAWUN), decf("nawupf", id.NAWUPF), decf("nacwu", id.NACWU), decf("noiob", id.NOIOB),
		decf("npwg", id.NPWG), decf("npwa", id.NPWA), decf("npdg", id.NPDG), decf("npda", id.NPDA), decf("nows", id.NOWS),
		decf("anagrpid", id.ANAGRPID), hexf("nsattr", id.NSATTR),
		strf("nguid", fmt.Sprintf("%x", id.NGUID)), strf("eui64", fmt.Sprintf("%x", id.EUI64)),
	}
	if u, ok := ns.UUID(); ok {
		f = append(f, strf("uuid", initiator.FormatUUID(u)))
	}
	return f
}

// anaGroups reads the ANA log page of a controller that reports ANA (CMIC bit 3): the
// state of each ANA group through this controller, with its namespaces. It reads the
// largest log the controller can have, as the Linux host does.
func anaGroups(ctx context.Context, c *initiator.Controller) ([]nvmeproto.ANAGroupDescriptor, error) {
	id := c.Identify()
	if c.IsDiscovery() || id.CMIC&nvmeproto.CMICANA == 0 {
		return nil, nil
	}
	n := nvmeproto.ANALogHeaderSize + int(id.NANAGRPID)*nvmeproto.ANAGroupDescriptorSize + 4*int(id.MNAN)
	if n > 1<<20 {
		return nil, fmt.Errorf("identify: NANAGRPID %d and MNAN %d make an ANA log of %d bytes; not reading it", id.NANAGRPID, id.MNAN, n)
	}
	b := make([]byte, (n+3)&^3)
	if err := c.GetLogPage(ctx, nvmeproto.LIDANA, nvmeproto.NSIDAll, 0, b); err != nil {
		return nil, fmt.Errorf("identify: reading the ANA log: %w", err)
	}
	var l nvmeproto.ANALog
	if err := l.Unmarshal(b); err != nil {
		return nil, fmt.Errorf("identify: %w", err)
	}
	return l.Groups, nil
}

func printIdentify(w io.Writer, c *initiator.Controller, groups []nvmeproto.ANAGroupDescriptor, nss []*initiator.Namespace) {
	fmt.Fprintf(w, "NVME Identify Controller:\n")
	for _, f := range ctrlFields(c) {
		fmt.Fprintf(w, "%-10s: %s\n", f.name, f.text)
	}
	fmt.Fprintf(w, "\nController %d: CAP %v, version %v, %d I/O queue(s) of %d, max transfer %s, in-capsule data %s, keep alive %v\n",
		c.ID(), c.CAP(), c.Version(), c.IOQueues(), ioDepthOf(c), humanize.IBytes(uint64(c.MaxTransferSize())),
		humanize.IBytes(uint64(c.InCapsuleDataSize())), c.KeepAliveTimeout())
	for _, g := range groups {
		fmt.Fprintf(w, "ANA group %d: %v, namespaces %v\n", g.GroupID, g.State, g.NSIDs)
	}
	for _, ns := range nss {
		id := ns.Identify()
		fmt.Fprintf(w, "\nNVME Identify Namespace %d:\n", ns.NSID)
		for _, f := range nsFields(ns) {
			fmt.Fprintf(w, "%-10s: %s\n", f.name, f.text)
		}
		for i := 0; i <= int(id.NLBAF) && i < len(id.LBAF); i++ {
			in := ""
			if i == id.FormatIndex() {
				in = "(in use)"
			}
			fmt.Fprintf(w, "lbaf %2d : ms:%-3d lbads:%-2d rp:%#x %s\n", i, id.LBAF[i].MS, id.LBAF[i].LBADS, id.LBAF[i].RP, in)
		}
		fmt.Fprintf(w, "Namespace %d: %s (%d blocks of %d bytes)\n", ns.NSID, humanize.IBytes(uint64(ns.Size())), ns.Blocks(), ns.BlockSize())
	}
	if len(nss) == 0 && !c.IsDiscovery() {
		fmt.Fprintf(w, "\nno active namespaces\n")
	}
}

func ioDepthOf(c *initiator.Controller) int {
	if c.IOQueues() == 0 {
		return 0
	}
	return c.IOQueue(0).Size() // with authentication too: Depth may leave out an entry
}

func fieldMap(fs []field) map[string]any {
	m := make(map[string]any, len(fs))
	for _, f := range fs {
		m[f.name] = f.val
	}
	return m
}

func printIdentifyJSON(w io.Writer, c *initiator.Controller, groups []nvmeproto.ANAGroupDescriptor, nss []*initiator.Namespace) error {
	type lbaf struct {
		MS    uint16 `json:"ms"`
		LBADS uint8  `json:"ds"`
		RP    uint8  `json:"rp"`
		InUse bool   `json:"in_use"`
	}
	type anaOut struct {
		Group uint32   `json:"group"`
		State string   `json:"state"`
		NSIDs []uint32 `json:"nsids"`
	}
	type nsOut struct {
		NSID      uint32         `json:"nsid"`
		SizeBytes int64          `json:"size_bytes"`
		BlockSize int            `json:"block_size"`
		Blocks    uint64         `json:"blocks"`
		Identify  map[string]any `json:"identify"`
		LBAFormat []lbaf         `json:"lbafs"`
	}
	out := struct {
		Controller map[string]any `json:"controller"`
		CAP        string         `json:"cap"`
		Version    string         `json:"version"`
		IOQueues   int            `json:"io_queues"`
		QueueSize  int            `json:"queue_size"`
		MaxXfer    int            `json:"max_transfer_bytes"`
		InCapsule  int            `json:"in_capsule_data_bytes"`
		KATOms     int64          `json:"kato_ms"`
		ANAGroups  []anaOut       `json:"ana_groups"`
		Namespaces []nsOut        `json:"namespaces"`
	}{Controller: fieldMap(ctrlFields(c)), CAP: fmt.Sprintf("%#x", uint64(c.CAP())), Version: c.Version().String(),
		IOQueues: c.IOQueues(), QueueSize: ioDepthOf(c), MaxXfer: c.MaxTransferSize(), InCapsule: c.InCapsuleDataSize(),
		KATOms: c.KeepAliveTimeout().Milliseconds(), ANAGroups: []anaOut{}, Namespaces: []nsOut{}}
	for _, g := range groups {
		out.ANAGroups = append(out.ANAGroups, anaOut{g.GroupID, g.State.String(), append([]uint32{}, g.NSIDs...)})
	}
	for _, ns := range nss {
		id := ns.Identify()
		n := nsOut{NSID: ns.NSID, SizeBytes: ns.Size(), BlockSize: ns.BlockSize(), Blocks: ns.Blocks(), Identify: fieldMap(nsFields(ns))}
		for i := 0; i <= int(id.NLBAF) && i < len(id.LBAF); i++ {
			n.LBAFormat = append(n.LBAFormat, lbaf{id.LBAF[i].MS, id.LBAF[i].LBADS, id.LBAF[i].RP, i == id.FormatIndex()})
		}
		out.Namespaces = append(out.Namespaces, n)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
