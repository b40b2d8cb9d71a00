package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/target"
	"github.com/gonvmf/gonvmf/target/control"
	pb "github.com/gonvmf/gonvmf/target/control/controlpb"
)

// ctlCommand is the control API's command-line client.
func ctlCommand() *cli.Command {
	return &cli.Command{
		Name:  "ctl",
		Usage: "change and inspect a running gonvmf serve (subsystems, namespaces, hosts and their keys, listeners, ANA states, controllers, statistics)",
		Description: `ctl talks to the control API of a running gonvmf serve: on its Unix socket
(control.socket in its configuration, /run/gonvmf/gonvmf.sock by default; root only), or
over TCP with mutual TLS when the target serves that. Every change is atomic: it applies
whole or changes nothing, and an error names the object and the reason. Hosts see
namespace changes without reconnecting, and discovery log changes as they happen.

  gonvmf ctl subsystem ls
  gonvmf ctl subsystem add nqn.2024-01.com.example:vol7 --host <host NQN> --ns nsid=1,backend=file,path=/srv/vol7.img,size=100GiB
  gonvmf ctl ns add nqn.2024-01.com.example:vol7 --nsid 2 --backend block --path /dev/vg0/vol7b
  gonvmf ctl ns add nqn.2024-01.com.example:vol7 --nsid 3 --backend rbd --rbd-pool rbd --rbd-image vol7c --rbd-user gonvmf
  gonvmf ctl ns resize nqn.2024-01.com.example:vol7 1 200GiB
  gonvmf ctl ns reopen nqn.2024-01.com.example:vol7 1      # after a failed sync (STATE failed in ns ls)
  gonvmf ctl host deny nqn.2024-01.com.example:vol7 <host NQN>
  nvme gen-dhchap-key --nqn <host NQN> | gonvmf ctl host key set <host NQN> --dhchap-secret -
  gonvmf ctl ana set 10.99.0.1 4421 1 optimized
  gonvmf ctl ns ana-group nqn.2024-01.com.example:vol7 1 2
  gonvmf ctl ctrl ls
  gonvmf ctl save -o /etc/gonvmf/target.yaml

Listings print a table, or with --json the API's messages (field names as in
target/control/controlpb/control.proto). The connection flags go before the subcommand.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Value: conf.DefaultControlSocket, EnvVars: []string{"GONVMF_SOCKET"},
				Usage: "the control API's Unix `PATH` (the target's control.socket)"},
			&cli.StringFlag{Name: "tcp", EnvVars: []string{"GONVMF_CONTROL_TCP"},
				Usage: "reach the control API over TCP at `ADDR:PORT` (mutual TLS) instead of the socket"},
			&cli.StringFlag{Name: "tls-cert", Usage: "with --tcp: this client's PEM certificate `FILE`"},
			&cli.StringFlag{Name: "tls-key", Usage: "with --tcp: its PEM private key `FILE`"},
			&cli.StringFlag{Name: "tls-ca", Usage: "with --tcp: PEM `FILE` of the CA that signed the target's certificate"},
			&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute,
				Usage: "give up on a call after `DURATION` (removing a namespace waits for its commands in flight, and an ANA state that serves no I/O for the commands admitted before it)"},
		},
		Subcommands: []*cli.Command{
			{Name: "subsystem", Aliases: []string{"subsys"}, Usage: "list, add and remove subsystems", Subcommands: []*cli.Command{
				leaf("ls", "list the subsystems", "", ctlSubsystemLs),
				leaf("add", "add a subsystem with its hosts and namespaces", "NQN", ctlSubsystemAdd,
					&cli.StringFlag{Name: "serial", Usage: "Identify serial `SN` (default: derived from the NQN)"},
					&cli.StringFlag{Name: "model", Usage: "Identify model `MN` (default: gonvmf)"},
					&cli.UintFlag{Name: "cntlid-min", DefaultText: strconv.Itoa(conf.MinCNTLID),
						Usage: "lowest controller `ID` handed out (two targets serving one subsystem need disjoint ranges)"},
					&cli.UintFlag{Name: "cntlid-max", DefaultText: strconv.Itoa(conf.MaxCNTLID), Usage: "highest controller `ID` handed out"},
					&cli.BoolFlag{Name: "allow-any-host", Usage: "let every host connect"},
					&cli.BoolFlag{Name: "auth-required", Usage: "admit only hosts that authenticate (DH-HMAC-CHAP keys: see host key set)"},
					&cli.StringSliceFlag{Name: "host", Usage: "host `NQN` allowed to connect (repeat for more)"},
					&cli.StringSliceFlag{Name: "ns", Usage: "a namespace as `KEY=VALUE,...` with the configuration's keys, e.g. nsid=1,backend=null,size=1GiB (repeat for more)"},
					&cli.StringFlag{Name: "yaml", Usage: "read the whole subsystem from `FILE` (one subsystems[] item of the configuration; - for standard input)"}),
				leaf("rm", "remove a subsystem (its controllers are disconnected first)", "NQN", ctlSubsystemRm),
				leaf("auth", "require in-band authentication of new connections (on: only hosts with keys, see host key) or stop requiring it (off)", "NQN on|off", ctlSubsystemAuth),
			}},
			{Name: "ns", Aliases: []string{"namespace"}, Usage: "list, add, remove, resize, write-protect and reopen namespaces, and move them to another ANA group", Subcommands: []*cli.Command{
				leaf("ls", "list namespaces (of one subsystem, or all) with their I/O counters", "[NQN]", ctlNsLs),
				leaf("add", "add a namespace to a subsystem", "NQN", ctlNsAdd,
					&cli.UintFlag{Name: "nsid", DefaultText: "none", Usage: "namespace `ID`, 1..1024 (required)"},
					&cli.StringFlag{Name: "backend", Usage: "`KIND`: file, block, null, memory or rbd (required; rbd: the ceph build, the image named by --rbd-pool and --rbd-image)"},
					&cli.StringFlag{Name: "path", Usage: "backing file or block device `PATH` (file, block)"},
					&cli.StringFlag{Name: "size", Usage: "capacity `SIZE`, e.g. 10GiB (null, memory; optional for file)"},
					&cli.UintFlag{Name: "lba-size", DefaultText: strconv.Itoa(conf.DefaultLBASize), Usage: "logical block `BYTES`, 512 or 4096"},
					&cli.BoolFlag{Name: "read-only", Usage: "write-protect the namespace"},
					&cli.StringFlag{Name: "uuid", Usage: "namespace `UUID` (default: derived)"},
					&cli.StringFlag{Name: "nguid", Usage: "namespace `NGUID` (default: derived)"},
					&cli.StringFlag{Name: "eui64", Usage: "namespace `EUI64` (default: derived)"},
					&cli.UintFlag{Name: "ana-group", DefaultText: strconv.Itoa(conf.DefaultANAGroup), Usage: "the namespace's ANA `GROUP`, 1..128"},
					&cli.BoolFlag{Name: "shared", Usage: "another target may open the same file or device (high availability)"},
					&cli.StringFlag{Name: "rbd-pool", Usage: "rbd: the RADOS `POOL` holding the image (required with --backend rbd)"},
					&cli.StringFlag{Name: "rbd-rados-namespace", Usage: "rbd: the RADOS `NAMESPACE` inside the pool (default: the pool's own)"},
					&cli.StringFlag{Name: "rbd-image", Usage: "rbd: the image's `NAME` (required with --backend rbd)"},
					&cli.StringFlag{Name: "rbd-ceph-conf", Usage: "rbd: the cluster's ceph.conf `FILE` (default: librados's search, $CEPH_CONF, /etc/ceph/ceph.conf)"},
					&cli.StringFlag{Name: "rbd-user", Usage: "rbd: the Ceph client `ID` to connect as, without client. (as the rbd tool's --id; default: admin)"},
					&cli.StringFlag{Name: "rbd-keyring", Usage: "rbd: the keyring `FILE` with the user's key (default: what ceph.conf says)"},
					&cli.StringFlag{Name: "rbd-create-size", Usage: "rbd: create a missing image of `SIZE`, e.g. 10GiB (an existing image keeps its size; default: the image must exist)"}),
				leaf("rm", "remove a namespace (waits for its commands in flight)", "NQN NSID", ctlNsRm),
				leaf("resize", "grow a namespace to SIZE, or without SIZE take its file's or device's current size", "NQN NSID [SIZE]", ctlNsResize),
				leaf("ro", "write-protect a namespace (on) or lift the protection (off)", "NQN NSID on|off", ctlNsRO),
				leaf("reopen", "close a namespace's backend and open it again: puts a failed namespace (a sync failed) back into service", "NQN NSID", ctlNsReopen),
				described(leaf("ana-group", "move a namespace to another ANA group (1..128) while hosts use it; its hosts follow at once", "NQN NSID GROUP", ctlNsANAGroup),
					anaWaitHelp),
			}},
			{Name: "host", Usage: "allow and deny hosts; their authentication keys", Subcommands: []*cli.Command{
				leaf("ls", "list the hosts allowed on each subsystem", "[NQN]", ctlHostLs),
				leaf("allow", "allow hosts to connect to a subsystem", "NQN HOSTNQN...", ctlHostAllow),
				leaf("deny", "take hosts off a subsystem's list; their controllers there are disconnected", "NQN HOSTNQN...", ctlHostDeny),
				leaf("set", "replace a subsystem's host list, or --any to let every host connect", "NQN [HOSTNQN...]", ctlHostSet,
					&cli.BoolFlag{Name: "any", Usage: "allow any host (allow_any_host)"}),
				{Name: "key", Usage: "the hosts that authenticate (DH-HMAC-CHAP): secrets, hash functions, DH groups", Description: hostKeyHelp,
					Subcommands: []*cli.Command{
						leaf("ls", "list the hosts that authenticate, secrets redacted", "", ctlHostKeyLs),
						leaf("set", "add a host that authenticates, or change its entry (a key rotation: --dhchap-secret)", "HOSTNQN", ctlHostKeySet,
							&cli.StringFlag{Name: "dhchap-secret", Aliases: []string{"S"},
								Usage: "the host's `SECRET`: the DHHC-1:... text nvme gen-dhchap-key prints, file:PATH of a file holding it (chmod 600; the target reads it), or - to read the text from standard input"},
							&cli.StringFlag{Name: "dhchap-ctrl-secret", Aliases: []string{"C"},
								Usage: "the controller's `SECRET` for bidirectional authentication (same forms); none removes it"},
							&cli.StringFlag{Name: "dhchap-hashes", Usage: "accepted hash functions in order of preference, `LIST` of sha256, sha384, sha512 (default: all, strongest first)"},
							&cli.StringFlag{Name: "dhchap-dhgroups", Usage: "accepted DH groups in order of preference, `LIST` of null, ffdhe2048 ... ffdhe8192 (default: all, null last)"}),
						leaf("rm", "remove a host's entry: it no longer authenticates (subsystems that require authentication refuse it)", "HOSTNQN", ctlHostKeyRm),
					}},
			}},
			{Name: "listener", Usage: "list, add and remove listeners", Subcommands: []*cli.Command{
				leaf("ls", "list the listeners", "", ctlListenerLs),
				leaf("add", "listen on another address (port 4420 unless given)", "ADDRESS [PORT]", ctlListenerAdd),
				leaf("rm", "stop a listener; the queues connected through it are disconnected", "ADDRESS [PORT]", ctlListenerRm),
			}},
			{Name: "ana", Usage: "list and set the ANA group states each listener reports (a namespace's group: ns ana-group)", Subcommands: []*cli.Command{
				leaf("ls", "list each listener's ANA group states (groups not listed are optimized)", "", ctlANALs),
				described(leaf("set", "set the state of an ANA group on a listener (port 4420 unless given): optimized, non-optimized, inaccessible, persistent-loss or change; its hosts follow at once", "ADDRESS [PORT] GROUP STATE", ctlANASet),
					anaWaitHelp),
			}},
			{Name: "ctrl", Aliases: []string{"controller"}, Usage: "list the connected controllers", Subcommands: []*cli.Command{
				leaf("ls", "list controllers (of one subsystem, or all): host, address, queues, keep-alive, connected since", "[NQN]", ctlCtrlLs),
			}},
			leaf("stats", "print the transport's, poll groups', buffer pools' and namespaces' counters", "", ctlStats),
			leaf("save", "print the running configuration as YAML that gonvmf check and gonvmf serve --config read", "", ctlSave,
				&cli.StringFlag{Name: "output", Aliases: []string{"o"},
					Usage: "write it to `FILE` instead of standard output: replaced whole, once the target has answered, with mode 0600 (it may hold secrets); use it rather than > FILE, which empties FILE even when the target cannot be reached"}),
		},
	}
}

// anaWaitHelp describes the wait of ctl ana set and ctl ns ana-group.
const anaWaitHelp = `A change that leaves a group serving no I/O on a listener (inaccessible,
persistent-loss, change; or a namespace moved into such a group) returns once every I/O
command to the group's namespaces (to the moved namespace) that the listener's queues
admitted before it has completed: from then on nothing sent through that listener reaches
the group's storage, and another target may serve the group. When --timeout ends the wait
first (the target answers a little before it), the change stays made but the command fails
(exit 1) and says how many commands still execute, on which controllers: run it again to
wait again before another target serves the group.`

// described sets c's description (its help text).
func described(c *cli.Command, text string) *cli.Command {
	c.Description = text
	return c
}

// leaf builds a subcommand that takes args (for the usage line), --json, and runs action
// with a control API client.
func leaf(name, usage, args string, action func(*ctlCtx) error, flags ...cli.Flag) *cli.Command {
	return &cli.Command{
		Name: name, Usage: usage, ArgsUsage: args,
		Flags: append([]cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the API's answer as JSON"}}, flags...),
		Action: func(c *cli.Context) error {
			x, err := newCtlCtx(c)
			if err != nil {
				return err
			}
			defer x.close()
			return x.wrap(action(x))
		},
	}
}

// ctlCtx is one ctl invocation: its flags, arguments, client and output.
type ctlCtx struct {
	c      *cli.Context
	cl     pb.ControlClient
	ctx    context.Context
	cancel context.CancelFunc
	closer io.Closer
	out    io.Writer
}

func newCtlCtx(c *cli.Context) (*ctlCtx, error) {
	o := control.DialOptions{Socket: c.String("socket"), TCP: c.String("tcp"),
		TLSCert: c.String("tls-cert"), TLSKey: c.String("tls-key"), TLSCA: c.String("tls-ca")}
	cl, cc, err := control.Dial(o)
	if err != nil {
		return nil, cli.Exit("ctl: "+err.Error(), exitFailure)
	}
	x := &ctlCtx{c: c, cl: cl, closer: cc, out: c.App.Writer}
	x.ctx, x.cancel = context.WithTimeout(c.Context, c.Duration("timeout"))
	return x, nil
}

func (x *ctlCtx) close() {
	x.cancel()
	x.closer.Close()
}

// wrap turns an API error into the command's error: the status message, and for an
// unreachable target a hint.
func (x *ctlCtx) wrap(err error) error {
	if err == nil {
		return nil
	}
	var ee cli.ExitCoder
	if errors.As(err, &ee) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return cli.Exit(x.name()+": "+err.Error(), exitFailure)
	}
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		where := x.c.String("socket")
		if t := x.c.String("tcp"); t != "" {
			where = t
		}
		msg = fmt.Sprintf("cannot reach gonvmf's control API at %s: %s (is gonvmf serve running?)", where, msg)
	case codes.DeadlineExceeded:
		if x.ctx.Err() != nil { // the target's own answer, an ANA change's wait that ended first, is said as it is
			msg = fmt.Sprintf("no answer within --timeout %v: %s", x.c.Duration("timeout"), msg)
		}
	}
	return cli.Exit(fmt.Sprintf("%s: %s", x.name(), msg), exitFailure)
}

// name is the command's name below gonvmf, "ctl ns add".
func (x *ctlCtx) name() string {
	var parts []string
	for _, c := range x.c.Lineage() {
		if c.Command != nil && c.Command.Name != "" && c.Command.Name != c.App.Name {
			parts = append([]string{c.Command.Name}, parts...)
		}
	}
	return strings.Join(parts, " ")
}

// args checks the argument count (min..max; max -1: any) and returns them.
func (x *ctlCtx) args(min, max int) ([]string, error) {
	a := x.c.Args().Slice()
	if len(a) < min || max >= 0 && len(a) > max {
		return nil, usageError("usage: gonvmf %s %s", x.name(), x.c.Command.ArgsUsage)
	}
	return a, nil
}

// nsArgs checks the argument count of a command whose arguments start with SUBNQN NSID,
// and parses the NSID.
func (x *ctlCtx) nsArgs(min, max int) ([]string, uint32, error) {
	a, err := x.args(min, max)
	if err != nil {
		return nil, 0, err
	}
	nsid, err := parseNSID(a[1])
	return a, nsid, err
}

// parseOnOff takes "on" or "off"; what, in the error, says what on means.
func parseOnOff(s, what string) (bool, error) {
	switch s {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return false, usageError("%q: write on (%s) or off", s, what)
}

func parseNSID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil || n == 0 {
		return 0, usageError("%q is not a namespace ID; use 1..%d", s, conf.MaxNSID)
	}
	return uint32(n), nil
}

// print writes m as JSON with --json, or calls human.
func (x *ctlCtx) print(m proto.Message, human func(w io.Writer)) error {
	if x.c.Bool("json") {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
		if err != nil {
			return err
		}
		fmt.Fprintln(x.out, string(b))
		return nil
	}
	human(x.out)
	return nil
}

// table writes rows aligned in columns.
func table(w io.Writer, header string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func bytesText(n uint64) string {
	if n == 0 {
		return "-"
	}
	return humanize.IBytes(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// --- subsystems ---

func ctlSubsystemLs(x *ctlCtx) error {
	if _, err := x.args(0, 0); err != nil {
		return err
	}
	r, err := x.cl.ListSubsystems(x.ctx, &pb.ListSubsystemsRequest{})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		var rows [][]string
		for _, s := range r.Subsystems {
			hosts := "any"
			if !s.AllowAnyHost {
				hosts = strconv.Itoa(len(s.Hosts))
			}
			auth := "-"
			if s.AuthRequired {
				auth = "required"
			}
			rows = append(rows, []string{s.Nqn, s.Serial, s.Model, hosts, auth, strconv.Itoa(len(s.Namespaces)), strconv.Itoa(int(s.Controllers))})
		}
		table(w, "NQN\tSERIAL\tMODEL\tHOSTS\tAUTH\tNAMESPACES\tCONTROLLERS", rows)
	})
}

func ctlSubsystemAdd(x *ctlCtx) error {
	a, err := x.args(0, 1)
	if err != nil {
		return err
	}
	var cs conf.Subsystem
	if f := x.c.String("yaml"); f != "" {
		data, err := readInput(f)
		if err != nil {
			return cli.Exit("ctl subsystem add: "+err.Error(), exitFailure)
		}
		if cs, err = conf.ParseSubsystem(data, f); err != nil {
			return cli.Exit(fmt.Sprintf("ctl subsystem add: %v", err), exitFailure)
		}
		dir := "."
		if f != "-" {
			dir = filepath.Dir(f)
		}
		absSubsystemPaths(&cs, dir)
	}
	if len(a) == 1 {
		cs.NQN = a[0]
	}
	if cs.NQN == "" {
		return usageError("name the subsystem: gonvmf ctl subsystem add NQN (or give nqn in --yaml)")
	}
	if v := x.c.String("serial"); v != "" {
		cs.Serial = v
	}
	if v := x.c.String("model"); v != "" {
		cs.Model = v
	}
	for _, f := range []struct {
		name string
		dst  *uint16
	}{{"cntlid-min", &cs.CNTLIDMin}, {"cntlid-max", &cs.CNTLIDMax}} {
		if x.c.IsSet(f.name) {
			v := x.c.Uint(f.name)
			if v < conf.MinCNTLID || v > conf.MaxCNTLID {
				return usageError("--%s %d: use %d..%d", f.name, v, conf.MinCNTLID, conf.MaxCNTLID)
			}
			*f.dst = uint16(v)
		}
	}
	if x.c.Bool("allow-any-host") {
		cs.AllowAnyHost = true
	}
	if x.c.Bool("auth-required") {
		cs.AuthRequired = true
	}
	cs.Hosts = append(cs.Hosts, x.c.StringSlice("host")...)
	for _, spec := range x.c.StringSlice("ns") {
		ns, err := parseNSSpec(spec)
		if err != nil {
			return err
		}
		cs.Namespaces = append(cs.Namespaces, ns)
	}
	r, err := x.cl.AddSubsystem(x.ctx, &pb.AddSubsystemRequest{Subsystem: control.SubsystemToPB(cs)})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "added subsystem %s (serial %s, %d namespaces)\n", r.Nqn, r.Serial, len(r.Namespaces))
	})
}

// parseNSSpec reads KEY=VALUE,... with the configuration's namespace keys, through the
// configuration's decoder (so errors and keys are the file's).
func parseNSSpec(spec string) (conf.Namespace, error) {
	var b strings.Builder
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return conf.Namespace{}, usageError("--ns %q: %q is not KEY=VALUE; write e.g. nsid=1,backend=null,size=1GiB", spec, kv)
		}
		fmt.Fprintf(&b, "%s: %s\n", strings.TrimSpace(k), strconv.Quote(strings.TrimSpace(v)))
	}
	ns, err := conf.ParseNamespace([]byte(b.String()), "--ns")
	if err != nil {
		return ns, usageError("%s", strings.ReplaceAll(err.Error(), "--ns:", "--ns "+spec+":"))
	}
	ns.Path = absPath(".", ns.Path)
	return ns, nil
}

// absSubsystemPaths makes the paths of a subsystem read from a YAML file in dir absolute
// (relative to dir): the target resolves relative paths against its own configuration's
// directory, not the file's. Backing files and devices, and rbd's ceph_conf and keyring.
func absSubsystemPaths(cs *conf.Subsystem, dir string) {
	for i := range cs.Namespaces {
		ns := &cs.Namespaces[i]
		ns.Path = absPath(dir, ns.Path)
		ns.RBD.CephConf = absPath(dir, ns.RBD.CephConf)
		ns.RBD.Keyring = absPath(dir, ns.RBD.Keyring)
	}
}

// absPath makes a backing path absolute against dir (the client's, not the target's).
func absPath(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	if a, err := filepath.Abs(filepath.Join(dir, p)); err == nil {
		return a
	}
	return p
}

func readInput(f string) ([]byte, error) {
	if f == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(f)
}

func ctlSubsystemRm(x *ctlCtx) error {
	a, err := x.args(1, 1)
	if err != nil {
		return err
	}
	r, err := x.cl.RemoveSubsystem(x.ctx, &pb.RemoveSubsystemRequest{Nqn: a[0]})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "removed subsystem %s (%d controllers disconnected)\n", a[0], r.DisconnectedControllers)
	})
}

// --- namespaces ---

func nsRows(nss []*pb.Namespace) [][]string {
	var rows [][]string
	for _, n := range nss {
		ro := "rw"
		if n.ReadOnly {
			ro = "ro"
		}
		c := n.Counters
		if c == nil {
			c = &pb.NamespaceCounters{}
		}
		var errs uint64
		for _, e := range c.Errors {
			errs += e.Count
		}
		rows = append(rows, []string{n.Subsystem, strconv.Itoa(int(n.Nsid)), n.Backend, orDash(nsPath(n)),
			humanize.IBytes(n.Blocks * uint64(n.LbaSize)), strconv.Itoa(int(n.LbaSize)), ro, orDash(n.State),
			fmt.Sprintf("%d/%s", c.ReadCommands, bytesText(c.ReadBytes)), fmt.Sprintf("%d/%s", c.WriteCommands, bytesText(c.WriteBytes)),
			u(c.FlushCommands), u(c.OtherCommands), u(errs)})
	}
	return rows
}

const nsHeader = "SUBSYSTEM\tNSID\tBACKEND\tPATH\tSIZE\tLBA\tMODE\tSTATE\tREADS\tWRITES\tFLUSHES\tOTHER\tERRORS"

// nsPath is where a namespace's data lives: its file or device, or its rbd image.
func nsPath(n *pb.Namespace) string {
	if r := n.Rbd; r != nil && r.Image != "" {
		if r.RadosNamespace != "" {
			return r.Pool + "/" + r.RadosNamespace + "/" + r.Image
		}
		return r.Pool + "/" + r.Image
	}
	return n.Path
}

// nsFailures writes, below a table of namespaces, why each failed one failed and how to
// put it back into service.
func nsFailures(w io.Writer, nss []*pb.Namespace) {
	for _, n := range nss {
		if n.State == control.StateFailed {
			fmt.Fprintf(w, "\nnamespace %d of %s failed: %s\n  writes and flushes get Write Fault until it is reopened: deal with the storage, then gonvmf ctl ns reopen %s %d\n",
				n.Nsid, n.Subsystem, n.Failure, n.Subsystem, n.Nsid)
		}
	}
}

func ctlNsLs(x *ctlCtx) error {
	a, err := x.args(0, 1)
	if err != nil {
		return err
	}
	req := &pb.ListNamespacesRequest{}
	if len(a) == 1 {
		req.Subsystem = a[0]
	}
	r, err := x.cl.ListNamespaces(x.ctx, req)
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		table(w, nsHeader, nsRows(r.Namespaces))
		nsFailures(w, r.Namespaces)
	})
}

// flagUint32 returns the uint flag name, which fills a 32-bit field: a larger value is
// refused, not truncated into another one (the target checks the field's own range).
func flagUint32(c *cli.Context, name string) (uint32, error) {
	v := c.Uint(name)
	if v > math.MaxUint32 {
		return 0, usageError("--%s %d: out of range (at most %d)", name, v, uint32(math.MaxUint32))
	}
	return uint32(v), nil
}

func ctlNsAdd(x *ctlCtx) error {
	a, err := x.args(1, 1)
	if err != nil {
		return err
	}
	c := x.c
	if !c.IsSet("nsid") || c.String("backend") == "" {
		return usageError("--nsid and --backend are required: gonvmf ctl ns add NQN --nsid N --backend file|block|null|memory|rbd [--path P] [--size S] [--rbd-pool POOL --rbd-image NAME] ...")
	}
	var nums [3]uint32
	for i, name := range []string{"nsid", "lba-size", "ana-group"} {
		if nums[i], err = flagUint32(c, name); err != nil {
			return err
		}
	}
	n := &pb.Namespace{Nsid: nums[0], Backend: c.String("backend"), Path: absPath(".", c.String("path")),
		LbaSize: nums[1], ReadOnly: c.Bool("read-only"), Uuid: c.String("uuid"), Nguid: c.String("nguid"), Eui64: c.String("eui64"),
		AnaGroup: nums[2], Shared: c.Bool("shared")}
	if s := c.String("size"); s != "" {
		sz, err := conf.ParseSize(s)
		if err != nil {
			return usageError("--size %q: %v", s, err)
		}
		n.Size = uint64(sz)
	}
	if n.Rbd, err = rbdFlags(c); err != nil {
		return err
	}
	if err := checkNsFlags(a[0], n); err != nil {
		return err
	}
	r, err := x.cl.AddNamespace(x.ctx, &pb.AddNamespaceRequest{Subsystem: a[0], Namespace: n})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "added namespace %d to %s: %s, %s (%d blocks of %d bytes)\n", r.Nsid, a[0], nsText(r),
			humanize.IBytes(r.Blocks*uint64(r.LbaSize)), r.Blocks, r.LbaSize)
	})
}

// rbdFlags returns the image ns add's --rbd-* flags name (the configuration's rbd keys,
// dashes for underscores), nil when none is given. ceph_conf and keyring are made absolute
// against the client's working directory.
func rbdFlags(c *cli.Context) (*pb.RBD, error) {
	set := false
	for _, f := range c.Command.Flags {
		if name := f.Names()[0]; strings.HasPrefix(name, "rbd-") && c.IsSet(name) {
			set = true
		}
	}
	if !set {
		return nil, nil
	}
	r := &pb.RBD{Pool: c.String("rbd-pool"), RadosNamespace: c.String("rbd-rados-namespace"), Image: c.String("rbd-image"),
		CephConf: absPath(".", c.String("rbd-ceph-conf")), User: c.String("rbd-user"), Keyring: absPath(".", c.String("rbd-keyring"))}
	if c.IsSet("rbd-create-size") {
		s := c.String("rbd-create-size")
		sz, err := conf.ParseSize(s)
		if err != nil {
			return nil, usageError("--rbd-create-size %q: %v", s, err)
		}
		if sz == 0 { // the configuration's create_size: 0; without the flag the image must exist
			return nil, usageError("--rbd-create-size %q: an image of 0 bytes holds nothing; give a size, e.g. --rbd-create-size 10GiB, or leave the flag out", s)
		}
		r.CreateSize = uint64(sz)
	}
	return r, nil
}

// nsFlagPrefix is the field path conf gives the namespace checkNsFlags validates.
const nsFlagPrefix = "subsystems[0].namespaces[0]."

// checkNsFlags validates the namespace ns add's flags describe by the configuration's
// rules for a namespace on its own (conf.Config.Resolve of a configuration that holds
// only it), and reports what is wrong with the flags' names: a usage error, before the
// target is asked. What depends on the running configuration (a used NSID or image) and
// the identifiers' syntax is the target's to report.
func checkNsFlags(nqn string, n *pb.Namespace) error {
	ns, err := control.NamespaceFromPB(n)
	if err != nil {
		return nil
	}
	cfg := &conf.Config{Subsystems: []conf.Subsystem{{NQN: nqn, AllowAnyHost: true, Namespaces: []conf.Namespace{ns}}}}
	var msgs []string
	for _, fe := range conf.Errors(cfg.Resolve()) {
		field, ok := strings.CutPrefix(fe.Field, nsFlagPrefix)
		if !ok {
			continue
		}
		m := nsFlagName(field)
		if fe.Value != "" {
			m += " " + fe.Value
		}
		m += ": " + fe.Msg
		if fix := fe.FixText(nsFlagFix); fix != "" {
			m += "; " + fix
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return nil
	}
	return usageError("%s", strings.Join(msgs, "\n"))
}

// nsFlagName is the ns add flag of a namespace's configuration field ("rbd.ceph_conf":
// --rbd-ceph-conf).
func nsFlagName(field string) string {
	if field == "rbd" {
		return "--rbd-*"
	}
	return "--" + strings.NewReplacer(".", "-", "_", "-").Replace(field)
}

// nsFlagFix writes a configuration key that a fix names (conf.FieldError.FixText) as ns
// add's flags: "--size", with an example "--size 10GiB", the rbd mapping's example as its
// keys' flags, and the rbd mapping named alone as the --rbd-* flags.
func nsFlagFix(k conf.FixKey) string {
	field := strings.TrimPrefix(k.Field, nsFlagPrefix)
	switch {
	case len(k.Sub) > 0:
		flags := make([]string, len(k.Sub))
		for i, s := range k.Sub {
			flags[i] = nsFlagFix(s)
		}
		return strings.Join(flags, " ")
	case k.Value != "":
		return nsFlagName(field) + " " + k.Value
	case field == "rbd":
		return "the --rbd-* flags"
	}
	return nsFlagName(field)
}

func nsText(n *pb.Namespace) string {
	if n.Path != "" {
		return n.Backend + " " + n.Path
	}
	if r := n.Rbd; r != nil && r.Image != "" {
		return n.Backend + " " + nsPath(n)
	}
	return n.Backend
}

func ctlNsRm(x *ctlCtx) error {
	a, nsid, err := x.nsArgs(2, 2)
	if err != nil {
		return err
	}
	r, err := x.cl.RemoveNamespace(x.ctx, &pb.RemoveNamespaceRequest{Subsystem: a[0], Nsid: nsid})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) { fmt.Fprintf(w, "removed namespace %d from %s\n", nsid, a[0]) })
}

func ctlNsResize(x *ctlCtx) error {
	a, nsid, err := x.nsArgs(2, 3)
	if err != nil {
		return err
	}
	var size conf.Size
	if len(a) == 3 {
		if size, err = conf.ParseSize(a[2]); err != nil {
			return usageError("size %q: %v", a[2], err)
		}
	}
	r, err := x.cl.ResizeNamespace(x.ctx, &pb.ResizeNamespaceRequest{Subsystem: a[0], Nsid: nsid, Size: uint64(size)})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "namespace %d of %s: %s (%d blocks)\n", nsid, a[0], humanize.IBytes(r.Blocks*uint64(r.LbaSize)), r.Blocks)
	})
}

func ctlNsRO(x *ctlCtx) error {
	a, nsid, err := x.nsArgs(3, 3)
	if err != nil {
		return err
	}
	ro, err := parseOnOff(a[2], "write-protect")
	if err != nil {
		return err
	}
	r, err := x.cl.SetNamespaceReadOnly(x.ctx, &pb.SetNamespaceReadOnlyRequest{Subsystem: a[0], Nsid: nsid, ReadOnly: ro})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		mode := "writable"
		if r.ReadOnly {
			mode = "write-protected"
		}
		fmt.Fprintf(w, "namespace %d of %s is %s\n", nsid, a[0], mode)
	})
}

func ctlNsANAGroup(x *ctlCtx) error {
	a, nsid, err := x.nsArgs(3, 3)
	if err != nil {
		return err
	}
	g, err := parseANAGroup(a[2])
	if err != nil {
		return err
	}
	r, err := x.cl.SetNamespaceANAGroup(x.ctx, &pb.SetNamespaceANAGroupRequest{Subsystem: a[0], Nsid: nsid, AnaGroup: g})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "namespace %d of %s is in ANA group %d\n", nsid, a[0], r.AnaGroup)
	})
}

func ctlNsReopen(x *ctlCtx) error {
	a, nsid, err := x.nsArgs(2, 2)
	if err != nil {
		return err
	}
	r, err := x.cl.ReopenNamespace(x.ctx, &pb.ReopenNamespaceRequest{Subsystem: a[0], Nsid: nsid})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		if r.ClearedFailure != "" {
			fmt.Fprintf(w, "reopened namespace %d of %s (state %s); cleared the failure: %s\n", nsid, a[0], r.GetNamespace().GetState(), r.ClearedFailure)
		} else {
			fmt.Fprintf(w, "reopened namespace %d of %s (state %s); it had not failed\n", nsid, a[0], r.GetNamespace().GetState())
		}
	})
}

// --- hosts ---

func ctlHostLs(x *ctlCtx) error {
	a, err := x.args(0, 1)
	if err != nil {
		return err
	}
	r, err := x.cl.ListSubsystems(x.ctx, &pb.ListSubsystemsRequest{})
	if err != nil {
		return err
	}
	out := &pb.ListSubsystemsResponse{}
	for _, s := range r.Subsystems {
		if len(a) == 0 || s.Nqn == a[0] {
			s.Namespaces = nil
			out.Subsystems = append(out.Subsystems, s)
		}
	}
	if len(a) == 1 && len(out.Subsystems) == 0 {
		return status.Errorf(codes.NotFound, "subsystem %q is not being served", a[0])
	}
	return x.print(out, func(w io.Writer) {
		var rows [][]string
		for _, s := range out.Subsystems {
			if s.AllowAnyHost {
				rows = append(rows, []string{s.Nqn, "(any host)"})
			}
			for _, h := range s.Hosts {
				rows = append(rows, []string{s.Nqn, h})
			}
		}
		table(w, "SUBSYSTEM\tHOST", rows)
	})
}

func ctlHostAllow(x *ctlCtx) error {
	a, err := x.args(2, -1)
	if err != nil {
		return err
	}
	var r *pb.Subsystem
	for _, h := range a[1:] {
		if r, err = x.cl.AllowHost(x.ctx, &pb.AllowHostRequest{Subsystem: a[0], HostNqn: h}); err != nil {
			return err
		}
	}
	return x.print(r, func(w io.Writer) { fmt.Fprintf(w, "%s: %d hosts allowed\n", a[0], len(r.Hosts)) })
}

func ctlHostDeny(x *ctlCtx) error {
	a, err := x.args(2, -1)
	if err != nil {
		return err
	}
	var r *pb.Subsystem
	for _, h := range a[1:] {
		if r, err = x.cl.DenyHost(x.ctx, &pb.DenyHostRequest{Subsystem: a[0], HostNqn: h}); err != nil {
			return err
		}
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "%s: denied %s (their controllers disconnected); %d hosts allowed\n", a[0], strings.Join(a[1:], ", "), len(r.Hosts))
	})
}

func ctlHostSet(x *ctlCtx) error {
	a, err := x.args(1, -1)
	if err != nil {
		return err
	}
	anyHost := x.c.Bool("any")
	if anyHost == (len(a) > 1) {
		return usageError("give either --any or the host NQNs: gonvmf ctl host set NQN (--any | HOSTNQN...)")
	}
	r, err := x.cl.SetHosts(x.ctx, &pb.SetHostsRequest{Subsystem: a[0], AllowAnyHost: anyHost, Hosts: a[1:]})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		if r.AllowAnyHost {
			fmt.Fprintf(w, "%s: any host may connect\n", a[0])
		} else {
			fmt.Fprintf(w, "%s: %d hosts allowed\n", a[0], len(r.Hosts))
		}
	})
}

// --- in-band authentication ---

const hostKeyHelp = `The top-level hosts section of the running configuration: hosts that authenticate
with DH-HMAC-CHAP, their secret, the controller's secret (bidirectional
authentication), and the hash functions and DH groups they may use. A change applies
to new connections and to re-authentications; connections already authenticated keep
working until they reconnect or re-authenticate. Rotating a host's key:

  gonvmf ctl host key set <host NQN> --dhchap-secret "$(nvme gen-dhchap-key --nqn <host NQN>)"
  nvme gen-dhchap-key --nqn <host NQN> | gonvmf ctl host key set <host NQN> --dhchap-secret -
  gonvmf ctl host key set <host NQN> --dhchap-secret file:/etc/gonvmf/host1.key
  gonvmf ctl subsystem auth <NQN> on      # admit only hosts with keys

A secret on the command line is visible to other users in the process list: prefer -
(standard input) or file:. Listings never print a secret (an inline one shows as its
hash and key length, a file: one as its path); gonvmf ctl save writes them as given.`

func ctlSubsystemAuth(x *ctlCtx) error {
	a, err := x.args(2, 2)
	if err != nil {
		return err
	}
	on, err := parseOnOff(a[1], "require authentication")
	if err != nil {
		return err
	}
	r, err := x.cl.SetAuthRequired(x.ctx, &pb.SetAuthRequiredRequest{Subsystem: a[0], AuthRequired: on})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		if r.AuthRequired {
			fmt.Fprintf(w, "%s: new connections must authenticate (%d controllers connected keep working)\n", a[0], r.Controllers)
		} else {
			fmt.Fprintf(w, "%s: hosts without keys may connect\n", a[0])
		}
	})
}

func ctlHostKeyLs(x *ctlCtx) error {
	if _, err := x.args(0, 0); err != nil {
		return err
	}
	r, err := x.cl.ListHostKeys(x.ctx, &pb.ListHostKeysRequest{})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		var rows [][]string
		for _, h := range r.Hosts {
			rows = append(rows, []string{h.Nqn, h.DhchapSecret, orDash(h.DhchapCtrlSecret), strings.Join(h.DhchapHashes, ","),
				strings.Join(h.DhchapDhgroups, ","), strconv.Itoa(len(h.Subsystems)), strconv.Itoa(int(h.Controllers))})
		}
		table(w, "HOST\tSECRET\tCTRL_SECRET\tHASHES\tDHGROUPS\tSUBSYSTEMS\tCONTROLLERS", rows)
	})
}

// secretArg reads a --dhchap-secret style value: - reads the DHHC-1 text from standard
// input; file:PATH is made absolute against the current directory (the target reads the
// file); anything else is sent as it is (the target checks it).
func secretArg(x *ctlCtx, flag string) (string, error) {
	v := x.c.String(flag)
	switch {
	case v == "-":
		b, err := io.ReadAll(io.LimitReader(x.c.App.Reader, 4096))
		if err != nil {
			return "", cli.Exit(fmt.Sprintf("%s: --%s -: reading standard input: %v", x.name(), flag, err), exitFailure)
		}
		v = strings.TrimSpace(string(b))
		if v == "" {
			return "", usageError("--%s -: standard input was empty; pipe the DHHC-1:... text nvme gen-dhchap-key prints", flag)
		}
	case strings.HasPrefix(v, conf.SecretFilePrefix):
		p := strings.TrimPrefix(v, conf.SecretFilePrefix)
		if p == "" {
			return "", usageError("--%s file: names no file; write file:PATH", flag)
		}
		v = conf.SecretFilePrefix + absPath(".", p)
	}
	return v, nil
}

// names splits a comma-separated list; "default" (or an empty value) is the empty list,
// which means the defaults.
func names(v string) []string {
	var out []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" && n != "default" {
			out = append(out, n)
		}
	}
	return out
}

func ctlHostKeySet(x *ctlCtx) error {
	a, err := x.args(1, 1)
	if err != nil {
		return err
	}
	if x.c.String("dhchap-secret") == "-" && x.c.String("dhchap-ctrl-secret") == "-" {
		return usageError("only one secret can come from standard input; give the other as file:PATH")
	}
	req := &pb.SetHostKeysRequest{Nqn: a[0]}
	var changed []string
	if x.c.IsSet("dhchap-secret") {
		v, err := secretArg(x, "dhchap-secret")
		if err != nil {
			return err
		}
		req.DhchapSecret = &v
		changed = append(changed, "secret")
	}
	if x.c.IsSet("dhchap-ctrl-secret") {
		v, err := secretArg(x, "dhchap-ctrl-secret")
		if err != nil {
			return err
		}
		if v == "none" {
			v = ""
		}
		req.DhchapCtrlSecret = &v
		changed = append(changed, "controller secret")
	}
	if x.c.IsSet("dhchap-hashes") {
		req.DhchapHashes = &pb.Names{Names: names(x.c.String("dhchap-hashes"))}
		changed = append(changed, "hash functions")
	}
	if x.c.IsSet("dhchap-dhgroups") {
		req.DhchapDhgroups = &pb.Names{Names: names(x.c.String("dhchap-dhgroups"))}
		changed = append(changed, "DH groups")
	}
	if len(changed) == 0 {
		return usageError("nothing to set: give --dhchap-secret, --dhchap-ctrl-secret, --dhchap-hashes or --dhchap-dhgroups")
	}
	r, err := x.cl.SetHostKeys(x.ctx, req)
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "host %s: %s set (secret %s, controller secret %s); new connections and re-authentications use them\n",
			r.Nqn, strings.Join(changed, ", "), r.DhchapSecret, orDash(r.DhchapCtrlSecret))
	})
}

func ctlHostKeyRm(x *ctlCtx) error {
	a, err := x.args(1, 1)
	if err != nil {
		return err
	}
	r, err := x.cl.RemoveHostKeys(x.ctx, &pb.RemoveHostKeysRequest{Nqn: a[0]})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "host %s no longer authenticates (its connected controllers keep working until they reconnect)\n", a[0])
	})
}

// --- listeners ---

func ctlListenerLs(x *ctlCtx) error {
	if _, err := x.args(0, 0); err != nil {
		return err
	}
	r, err := x.cl.ListListeners(x.ctx, &pb.ListListenersRequest{})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		var rows [][]string
		for _, l := range r.Listeners {
			rows = append(rows, []string{l.Transport, l.Address, strconv.Itoa(int(l.Port)), orDash(l.Device)})
		}
		table(w, "TRANSPORT\tADDRESS\tPORT\tDEVICE", rows)
	})
}

func listenerArgs(x *ctlCtx) (*pb.Listener, error) {
	a, err := x.args(1, 2)
	if err != nil {
		return nil, err
	}
	l := &pb.Listener{Address: a[0]}
	if len(a) == 2 {
		p, err := strconv.ParseUint(a[1], 10, 16)
		if err != nil || p == 0 {
			return nil, usageError("%q is not a port; use 1..65535", a[1])
		}
		l.Port = uint32(p)
	}
	return l, nil
}

func ctlListenerAdd(x *ctlCtx) error {
	l, err := listenerArgs(x)
	if err != nil {
		return err
	}
	r, err := x.cl.AddListener(x.ctx, &pb.AddListenerRequest{Listener: l})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "listening on %s %s port %d (device %s)\n", r.Transport, r.Address, r.Port, orDash(r.Device))
	})
}

func ctlListenerRm(x *ctlCtx) error {
	l, err := listenerArgs(x)
	if err != nil {
		return err
	}
	r, err := x.cl.RemoveListener(x.ctx, &pb.RemoveListenerRequest{Listener: l})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "stopped listening on %s\n", strings.Join(x.c.Args().Slice(), " port "))
	})
}

// --- ANA ---

func ctlANALs(x *ctlCtx) error {
	if _, err := x.args(0, 0); err != nil {
		return err
	}
	r, err := x.cl.ListListeners(x.ctx, &pb.ListListenersRequest{})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		var rows [][]string
		for _, l := range r.Listeners {
			lis := []string{l.Transport, l.Address, strconv.Itoa(int(l.Port))}
			rows = append(rows, append(lis, "*", "optimized"))
			for _, a := range l.AnaStates {
				rows = append(rows, append(lis, strconv.Itoa(int(a.Group)), a.State))
			}
		}
		table(w, "TRANSPORT\tADDRESS\tPORT\tGROUP\tSTATE", rows)
	})
}

func ctlANASet(x *ctlCtx) error {
	a, err := x.args(3, 4)
	if err != nil {
		return err
	}
	l := &pb.Listener{Address: a[0]}
	if len(a) == 4 {
		p, err := strconv.ParseUint(a[1], 10, 16)
		if err != nil || p == 0 {
			return usageError("%q is not a port; use 1..65535", a[1])
		}
		l.Port = uint32(p)
		a = append(a[:1], a[2:]...)
	}
	g, err := parseANAGroup(a[1])
	if err != nil {
		return err
	}
	if _, err := conf.ParseANAState(a[2]); err != nil {
		return usageError("%v", err)
	}
	r, err := x.cl.SetANAState(x.ctx, &pb.SetANAStateRequest{Listener: l, Group: g, State: a[2]})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		fmt.Fprintf(w, "%s %s port %d: ANA group %d %s\n", r.Transport, r.Address, r.Port, g, a[2])
	})
}

// --- inspection ---

func ctlCtrlLs(x *ctlCtx) error {
	a, err := x.args(0, 1)
	if err != nil {
		return err
	}
	req := &pb.ListControllersRequest{}
	if len(a) == 1 {
		req.Subsystem = a[0]
	}
	r, err := x.cl.ListControllers(x.ctx, req)
	if err != nil {
		return err
	}
	now := time.Now()
	return x.print(r, func(w io.Writer) {
		var rows [][]string
		for _, c := range r.Controllers {
			io, depth := 0, 0
			for _, q := range c.Queues {
				if q.Qid != 0 {
					io++
					depth = max(depth, int(q.Depth))
				}
			}
			queues := "admin"
			if io > 0 {
				queues = fmt.Sprintf("admin+%dx%d", io, depth)
			}
			since := time.Unix(0, c.ConnectedUnixNano)
			kato := "-"
			if c.KeepAliveTimeoutMs > 0 {
				kato = (time.Duration(c.KeepAliveTimeoutMs) * time.Millisecond).String()
			}
			auth := "-"
			if c.Authenticated {
				auth = "yes"
			}
			rows = append(rows, []string{c.Subsystem, strconv.Itoa(int(c.Cntlid)), c.HostNqn, orDash(c.RemoteAddress), c.Listener,
				queues, kato, auth, since.Format("2006-01-02 15:04:05") + " (" + now.Sub(since).Round(time.Second).String() + ")"})
		}
		table(w, "SUBSYSTEM\tCNTLID\tHOST\tREMOTE\tLISTENER\tQUEUES\tKATO\tAUTH\tCONNECTED", rows)
	})
}

func ctlStats(x *ctlCtx) error {
	if _, err := x.args(0, 0); err != nil {
		return err
	}
	r, err := x.cl.GetStats(x.ctx, &pb.GetStatsRequest{})
	if err != nil {
		return err
	}
	return x.print(r, func(w io.Writer) {
		t := r.Transport
		fmt.Fprintf(w, "controllers %d, queues %d, discovery log generation %d\n", r.Controllers, r.Queues, r.DiscoveryGeneration)
		fmt.Fprintf(w, "transport: %d queue pairs, %d completions, %d polls, %d sleeps, %d wake-ups; waits: buffer %d, read credit %d, send queue %d\n\n",
			t.Connections, t.Completions, t.Polls, t.Sleeps, t.Wakeups, t.BufferWaits, t.ReadCreditWaits, t.SendQueueWaits)
		var rows [][]string
		for _, g := range r.PollGroups {
			rows = append(rows, []string{g.Device, strconv.Itoa(int(g.Group)), strconv.Itoa(int(g.Connections)), u(g.Polls), u(g.IdlePolls),
				u(g.Completions), u(g.Sleeps), u(g.Wakeups), u(g.BufferWaits), u(g.ReadCreditWaits), u(g.SendQueueWaits)})
		}
		table(w, "DEVICE\tGROUP\tQPS\tPOLLS\tIDLE\tCOMPLETIONS\tSLEEPS\tWAKEUPS\tBUF_WAITS\tREAD_WAITS\tSEND_WAITS", rows)
		fmt.Fprintln(w)
		rows = nil
		for _, p := range r.BufferPools {
			used := p.TotalBytes - p.FreeBytes
			pct := 0.0
			if p.TotalBytes > 0 {
				pct = 100 * float64(used) / float64(p.TotalBytes)
			}
			rows = append(rows, []string{p.Device, humanize.IBytes(p.TotalBytes), fmt.Sprintf("%s (%.0f%%)", humanize.IBytes(used), pct),
				humanize.IBytes(p.TotalBytes - p.LowestFreeBytes)})
		}
		table(w, "DEVICE\tBUFFER_POOL\tIN_USE\tPEAK", rows)
		fmt.Fprintln(w)
		table(w, nsHeader, nsRows(r.Namespaces))
		nsFailures(w, r.Namespaces)
		rows = nil
		for _, n := range r.Namespaces {
			c := n.GetCounters()
			for _, e := range c.GetErrors() {
				rows = append(rows, []string{n.Subsystem, strconv.Itoa(int(n.Nsid)), e.Op, e.Status, u(e.Count)})
			}
		}
		if len(rows) > 0 {
			fmt.Fprintln(w)
			table(w, "SUBSYSTEM\tNSID\tOP\tSTATUS\tERRORS", rows)
		}
		rows = nil
		for _, n := range r.Namespaces {
			for _, l := range n.GetCounters().GetLatency() {
				var h target.LatencyHistogram
				h.Count, h.Sum = l.Count, time.Duration(l.SumNs)
				copy(h.Buckets[:], l.Buckets)
				rows = append(rows, []string{n.Subsystem, strconv.Itoa(int(n.Nsid)), l.Op, u(l.Count), latText(h.Mean()),
					"≤" + latText(h.Quantile(0.5)), "≤" + latText(h.Quantile(0.99)), "≤" + latText(h.Quantile(0.999))})
			}
		}
		if len(rows) > 0 {
			fmt.Fprintln(w)
			table(w, "SUBSYSTEM\tNSID\tOP\tTIMED\tMEAN\tP50\tP99\tP99.9", rows)
		}
		fmt.Fprintf(w, "\nrefused: %s; RDMA connection requests rejected: %s\n", rejectsText(r.ConnectRejects), rejectsText(r.RdmaConnectRejects))
	})
}

// latText prints a latency with three significant digits.
func latText(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	}
	return fmt.Sprintf("%.3gµs", float64(d)/1e3)
}

// rejectsText lists the reasons that counted, or "none".
func rejectsText(rs []*pb.RejectCount) string {
	var parts []string
	for _, r := range rs {
		if r.Count > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r.Reason, r.Count))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

func ctlSave(x *ctlCtx) error {
	if _, err := x.args(0, 0); err != nil {
		return err
	}
	r, err := x.cl.SaveConfig(x.ctx, &pb.SaveConfigRequest{})
	if err != nil {
		return err
	}
	if f := x.c.String("output"); f != "" {
		if err := replaceFile(f, []byte(r.Yaml)); err != nil {
			return cli.Exit("ctl save: "+err.Error(), exitFailure)
		}
		fmt.Fprintf(x.c.App.ErrWriter, "saved the running configuration to %s\n", f)
		return nil
	}
	return x.print(r, func(w io.Writer) { fmt.Fprint(w, r.Yaml) })
}

// replaceFile makes path hold data, mode 0600, such that path is at every moment the old
// file or the new one, whole, a crash included: data goes to a new file in path's
// directory, which is synced and renamed over path, and then the directory is synced. A
// symbolic link at path keeps pointing where it does: the file it names is replaced.
func replaceFile(path string, data []byte) error {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp") // mode 0600
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("replacing %s: %w; it is as it was", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%s is written, but its directory could not be synced: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("%s is written, but its directory could not be synced: %w", path, err)
	}
	return nil
}

// flagsFirst returns args with the flags of a ctl subcommand moved ahead of its
// arguments, so that `gonvmf ctl ns add NQN --nsid 2` means `gonvmf ctl ns add --nsid 2
// NQN` (the cli package stops reading flags at the first argument). Everything after
// "--" stays as it is; arguments of other commands are not touched.
func flagsFirst(app *cli.App, args []string) []string {
	i := 1
	skipFlags := func(flags []cli.Flag) {
		for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "-" && args[i] != "--" {
			if takesValue(flags, args[i]) {
				i++
			}
			i++
		}
	}
	skipFlags(app.Flags)
	if i >= len(args) || args[i] != "ctl" {
		return args
	}
	cmds := app.Commands
	var cmd *cli.Command
	for i < len(args) {
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(args[i]) {
				next = c
			}
		}
		if next == nil {
			return args
		}
		cmd, i = next, i+1
		if len(cmd.Subcommands) == 0 {
			break
		}
		skipFlags(cmd.Flags)
		cmds = cmd.Subcommands
	}
	if cmd == nil || len(cmd.Subcommands) > 0 {
		return args
	}
	var flags, rest []string
	for j := i; j < len(args); j++ {
		a := args[j]
		switch {
		case a == "--":
			rest = append(rest, args[j:]...)
			j = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
			if takesValue(cmd.Flags, a) && j+1 < len(args) {
				j++
				flags = append(flags, args[j])
			}
		default:
			rest = append(rest, a)
		}
	}
	out := append(slices.Clone(args[:i]), flags...)
	return append(out, rest...)
}

// takesValue reports whether the flag token (-x, --name, not --name=value) names a flag
// that takes a value in the next token.
func takesValue(flags []cli.Flag, tok string) bool {
	if strings.Contains(tok, "=") {
		return false
	}
	name := strings.TrimLeft(tok, "-")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*cli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}

// parseANAGroup parses an ANA group ID argument (1..conf.MaxANAGroup); a bad one is a
// usage error.
func parseANAGroup(s string) (uint32, error) {
	g, err := strconv.ParseUint(s, 10, 32)
	if err != nil || g == 0 || g > conf.MaxANAGroup {
		return 0, usageError("%q is not an ANA group; use 1..%d", s, conf.MaxANAGroup)
	}
	return uint32(g), nil
}
