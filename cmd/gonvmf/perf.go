package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gonvmf/gonvmf/conf"
	"github.com/gonvmf/gonvmf/initiator"
	"github.com/gonvmf/gonvmf/initiator/perf"
	"github.com/urfave/cli/v2"
)

func perfCommand() *cli.Command {
	return &cli.Command{
		Name:  "perf",
		Usage: "measure a namespace: IOPS, bandwidth and latency percentiles, optionally verifying data",
		UsageText: "gonvmf perf -t rdma -a ADDRESS [-s PORT] -n NQN [-w WORKLOAD] [-o SIZE] [-q DEPTH] [-j QUEUES] [-T DURATION | -N IOS] [--verify] [--json]\n" +
			"   gonvmf perf -t loop --config FILE [-n NQN] [options]",
		Description: `perf drives one namespace with the initiator's asynchronous API, like spdk_nvme_perf
and fio: -j I/O queues, each with -q commands in flight, each command -o bytes, for -T
(or until -N I/Os), with workload read, write, randread, randwrite, rw (sequential
mixed) or randrw (random mixed, --rwmixread percent reads). Each queue works on its own
slice of the range (--offset, --size; default the whole namespace). It prints IOPS,
MiB/s and latency avg/p50/p90/p99/p99.9/max per direction, with a live progress line
on standard error (--progress=false to silence it), or JSON (--json).

--verify stamps every block written with its LBA, a generation and the run's seed (plus
a CRC-32C), never lets two commands touch the same block at once, and checks every block
read: a workload that reads first writes the whole range (prefill); one that writes
reads the whole range back at the end. Mismatches are reported with LBA and
expected/got values and make perf exit 1. A controller that fails or disappears stops
the run with an error (exit 1); perf never waits forever.

With -t loop the target runs on the configuration's own storage: a workload that writes
(write, randwrite, rw, randrw, or any with --verify) to a file, block or rbd namespace
overwrites the data there, which a gonvmf serve of the same file may be serving. perf
refuses it unless --allow-overwrite says that data may be lost; memory and null
namespaces live and die with perf and need no flag.`,
		Flags: append(fabricsFlags(" (with -t loop: default the configuration's first subsystem)"),
			&cli.StringFlag{Name: "rw", Aliases: []string{"w"}, Value: "randread", Usage: "`WORKLOAD`: read, write, randread, randwrite, rw or randrw"},
			&cli.IntFlag{Name: "rwmixread", Aliases: []string{"M"}, Value: 50, Usage: "`PERCENT` of reads in rw/randrw"},
			&cli.StringFlag{Name: "bs", Aliases: []string{"o"}, Value: "4k", Usage: "I/O `SIZE` (k, m suffixes are powers of 1024)"},
			&cli.IntFlag{Name: "iodepth", Aliases: []string{"q"}, Value: 32, Usage: "commands in flight per queue (`DEPTH`)"},
			&cli.IntFlag{Name: "queues", Aliases: []string{"j"}, Value: 1, Usage: "number of I/O `QUEUES` (one per connection)"},
			&cli.DurationFlag{Name: "runtime", Aliases: []string{"T"}, DefaultText: "10s unless -N is given", Usage: "run for `DURATION`"},
			&cli.Uint64Flag{Name: "ios", Aliases: []string{"N"}, DefaultText: "no limit", Usage: "stop after `COUNT` I/Os"},
			&cli.UintFlag{Name: "nsid", DefaultText: "the first", Usage: "namespace `NSID`"},
			&cli.StringFlag{Name: "offset", Value: "0", Usage: "start of the range in bytes (`SIZE`)"},
			&cli.StringFlag{Name: "size", Usage: "length of the range in bytes (`SIZE`; default the rest of the namespace, with --verify at most 256m)"},
			&cli.BoolFlag{Name: "verify", Aliases: []string{"V"}, Usage: "stamp and check data"},
			&cli.BoolFlag{Name: "fua", Usage: "write with FUA (force unit access)"},
			&cli.Uint64Flag{Name: "seed", DefaultText: "from the clock", Usage: "random `SEED`"},
			&cli.BoolFlag{Name: "allow-overwrite",
				Usage: "with -t loop: let a workload that writes (or --verify) overwrite the data of a file, block or rbd namespace"},
			&cli.BoolFlag{Name: "json", Usage: "print the results as JSON"},
			&cli.BoolFlag{Name: "progress", Value: true, Usage: "print a live progress line on standard error"},
			&cli.DurationFlag{Name: "io-timeout", Value: initiator.DefaultCommandTimeout, Usage: "fail the controller when a command takes longer than `DURATION`"},
			&cli.IntFlag{Name: "max-retries", Value: initiator.DefaultMaxRetries,
				Usage: fmt.Sprintf("send an I/O command the controller failed without Do Not Retry again up to `COUNT` times, 0..%d (0: never), as the Linux host's nvme_core.max_retries", initiator.MaxRetriesLimit)},
			&cli.StringFlag{Name: "cpuprofile", Hidden: true, Usage: "write a CPU profile of the measured run to `FILE`"}),
		Action: runPerf,
	}
}

// perfFlags is the parsed command line: the run, and the controller options it needs.
type perfFlags struct {
	run        perf.Config
	queues     int
	maxRetries int // initiator.Options.MaxRetries: negative for none
	json       bool
}

func parsePerf(c *cli.Context) (*perfFlags, error) {
	pf := &perfFlags{queues: c.Int("queues"), json: c.Bool("json")}
	nsid, err := flagUint32(c, "nsid")
	if err != nil {
		return nil, err
	}
	pc := &pf.run
	*pc = perf.Config{Workload: c.String("rw"), QueueDepth: c.Int("iodepth"), Queues: pf.queues,
		Runtime: c.Duration("runtime"), IOs: c.Uint64("ios"), NSID: nsid,
		Verify: c.Bool("verify"), FUA: c.Bool("fua"), Seed: c.Uint64("seed"), Quiet: pf.json,
		Progress: c.Bool("progress"), CPUProfile: c.String("cpuprofile")}
	if _, _, err = perf.ParseWorkload(pc.Workload, 0); err != nil {
		return nil, usageError("--rw %q: use read, write, randread, randwrite, rw or randrw", pc.Workload)
	}
	if pc.ReadPercent, pc.Random, err = perf.ParseWorkload(pc.Workload, c.Int("rwmixread")); err != nil {
		return nil, usageError("--rwmixread %d: want 0..100", c.Int("rwmixread"))
	}
	bs, err := perf.ParseSize(c.String("bs"))
	if err != nil || bs < 512 || bs > 16<<20 {
		return nil, usageError("--bs %q: want 512 bytes to 16m", c.String("bs"))
	}
	pc.BlockSize = int(bs)
	if pc.QueueDepth < 1 || pc.QueueDepth > initiator.MaxQueueSize {
		return nil, usageError("--iodepth %d: want 1..%d", pc.QueueDepth, initiator.MaxQueueSize)
	}
	if pf.queues < 1 || pf.queues > 256 {
		return nil, usageError("--queues %d: want 1..256", pf.queues)
	}
	switch n := c.Int("max-retries"); {
	case n < 0 || n > initiator.MaxRetriesLimit:
		return nil, usageError("--max-retries %d: want 0..%d retries of a failed I/O command (0: fail it at its first error)", n, initiator.MaxRetriesLimit)
	case n == 0:
		pf.maxRetries = -1 // Options.MaxRetries 0 would mean the default
	default:
		pf.maxRetries = n
	}
	if pc.Runtime < 0 {
		return nil, usageError("--runtime must be positive")
	}
	if pc.Runtime == 0 && pc.IOs == 0 {
		pc.Runtime = 10 * time.Second
	}
	if pc.Offset, err = perf.ParseSize(c.String("offset")); err != nil {
		return nil, usageError("--offset: %v", err)
	}
	if s := c.String("size"); s != "" {
		if pc.Size, err = perf.ParseSize(s); err != nil || pc.Size == 0 {
			return nil, usageError("--size %q: want a positive size", s)
		}
	}
	if pc.Seed == 0 {
		pc.Seed = uint64(time.Now().UnixNano()) | 1
	}
	return pf, nil
}

func runPerf(c *cli.Context) error {
	pf, err := parsePerf(c)
	if err != nil {
		return err
	}
	var checkLoop func(*conf.Config, string) error
	if !c.Bool("allow-overwrite") {
		checkLoop = func(cfg *conf.Config, subNQN string) error { return refuseOverwrite(cfg, subNQN, &pf.run) }
	}
	o, s, err := fabricsOptions(c, "", checkLoop)
	if err != nil {
		return err
	}
	o.Queues = pf.queues
	o.QueueSize = max(pf.run.QueueDepth, 2)
	o.CommandTimeout = c.Duration("io-timeout")
	o.MaxRetries = pf.maxRetries
	ctx, cancel := connectCtx(c)
	err = dial(ctx, o, s)
	cancel()
	if err != nil {
		return err
	}
	defer s.Close()
	pf.run.Target = targetName(&o)
	pf.run.Messages = c.App.ErrWriter
	res, err := perf.Run(c.Context, s.ctrl, pf.run)
	if res != nil {
		if pf.json {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetIndent("", "  ")
			enc.Encode(res)
		} else {
			res.Print(c.App.Writer)
		}
	}
	if err != nil {
		return cli.Exit("perf: "+err.Error(), exitFailure)
	}
	if res.Verify != nil && res.Verify.Mismatches > 0 {
		msg := fmt.Sprintf("perf: verify failed: %d blocks did not read back as written", res.Verify.Mismatches)
		if res.Verify.Unstamped == res.Verify.Mismatches {
			// Nothing perf wrote came back: the usual cause is a namespace that drops writes.
			msg += " (none carried a perf stamp: does the namespace discard writes, like a null backend? pick another with --nsid)"
		}
		return cli.Exit(msg, exitFailure)
	}
	return nil
}

func targetName(o *initiator.Options) string {
	if o.Transport == initiator.TransportLoop {
		return "loop (in-process target)"
	}
	return fmt.Sprintf("%s %s:%d", o.Transport, o.Addr, o.Port)
}

// refuseOverwrite returns a usage error when run writes (its workload, or --verify's
// prefill and stamps) to a namespace of the loop target cfg whose backend keeps its data
// outside this process (file, block, rbd), for --allow-overwrite to lift. The namespace
// is run's NSID, or as perf picks it, the lowest NSID of subsystem subNQN. What the
// configuration does not serve is left for the connection and perf to report.
func refuseOverwrite(cfg *conf.Config, subNQN string, run *perf.Config) error {
	if run.ReadPercent == 100 && !run.Verify {
		return nil
	}
	for _, sub := range cfg.Subsystems {
		if sub.NQN != subNQN {
			continue
		}
		var ns *conf.Namespace
		for i := range sub.Namespaces {
			n := &sub.Namespaces[i]
			if run.NSID == n.NSID || run.NSID == 0 && (ns == nil || n.NSID < ns.NSID) {
				ns = n
			}
		}
		if ns == nil || ns.Backend == conf.BackendMemory || ns.Backend == conf.BackendNull {
			return nil
		}
		where := ns.Path
		if ns.Backend == conf.BackendRBD {
			where = ns.RBD.Name()
		}
		what := "-w " + run.Workload
		if run.ReadPercent == 100 {
			what += " --verify" // its prefill writes the whole range
		}
		return usageError("perf %s would overwrite namespace %d of %s: its %s backend %s is real storage, which a gonvmf serve of %s may be serving; "+
			"pass --allow-overwrite if its data may be lost, or pick a memory or null namespace with --nsid", what, ns.NSID, subNQN, ns.Backend, where, cfg.File)
	}
	return nil
}
