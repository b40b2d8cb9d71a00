// Command gonvmf is the gonvmf NVMe-over-Fabrics target and its host tools.
//
//	gonvmf serve    --config FILE                 run the target (SIGHUP: apply the file's changes)
//	gonvmf ctl      [--socket PATH] CMD ...        change and inspect a running target (subsystem, ns, host,
//	                                              listener, ctrl, stats, save)
//	gonvmf check    --config FILE                 validate a configuration and print it resolved
//	gonvmf discover -t rdma -a ADDR [-s PORT]      print a target's discovery log (as nvme discover)
//	gonvmf identify -t rdma -a ADDR -n NQN         connect and print Identify Controller and Namespaces
//	gonvmf perf     -t rdma -a ADDR -n NQN [...]   measure a namespace: IOPS, bandwidth, latency; --verify
//	gonvmf version                                print the version
//
// discover, identify and perf take nvme-cli's transport flags; with -t loop --config FILE
// they run the configured target in this process and reach it without a network. Each
// subcommand lives in its own file as a constructor listed in commands below, which is the
// whole command table. The engines live in packages of their own (target/server for serve,
// initiator/perf for perf); this package parses flags and prints. Global flags set up
// logging (log/slog, to standard error; serve's through asyncLogger, so that its poll
// groups never wait for the log's reader). Exit status: 0 success, 1 failure, 2 usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/gonvmf/gonvmf/internal/asynclog"
	"github.com/urfave/cli/v2"
)

func main() {
	os.Exit(run(context.Background(), os.Args, os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// commands are the subcommands' constructors, in the order help lists them.
var commands = []func() *cli.Command{
	checkCommand,
	ctlCommand,
	discoverCommand,
	identifyCommand,
	perfCommand,
	serveCommand,
	versionCommand,
}

// usageError is an error in how gonvmf was invoked; it exits with status 2.
func usageError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), exitUsage)
}

// failed reports that a command failed after it has already printed why; exit status 1.
var failed = cli.Exit("", exitFailure)

// newApp builds the application; output goes to stdout and stderr.
func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "gonvmf",
		Usage:     "userspace NVMe over Fabrics (RDMA) target",
		Version:   versionString(),
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:    "log-level",
				Value:   "info",
				Usage:   "log messages at `LEVEL` and above: debug, info, warn or error",
				EnvVars: []string{"GONVMF_LOG_LEVEL"},
			},
			&cli.StringFlag{
				Name:    "log-format",
				Value:   "text",
				Usage:   "log as `FORMAT`: text or json",
				EnvVars: []string{"GONVMF_LOG_FORMAT"},
			},
		},
		Before: func(c *cli.Context) error {
			return setupLogging(c.App, c.App.ErrWriter, c.String("log-level"), c.String("log-format"))
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageError("unknown command %q; run 'gonvmf help' for the list", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		OnUsageError: func(c *cli.Context, err error, isSubcommand bool) error {
			return usageError("%v; run 'gonvmf help' for usage", err)
		},
		// run prints errors and picks the exit status; never let the library call os.Exit.
		ExitErrHandler: func(*cli.Context, error) {},
		// A repeated flag's values are taken whole: host NQNs and --ns specs may hold commas.
		DisableSliceFlagSeparator: true,
		HideHelpCommand:           false,
	}
	for _, newCommand := range commands {
		cmd := newCommand()
		usageErrors(cmd, "gonvmf "+cmd.Name)
		refuseUnknownSubcommands(cmd, "gonvmf "+cmd.Name)
		app.Commands = append(app.Commands, cmd)
	}
	return app
}

// usageErrors makes a flag that cmd, or any command of its tree, does not take (or a
// flag's bad value) a usage error (exit 2) that names the command's help, where the
// command has no handler of its own. Without one the library prints the help to standard
// output and exits 1.
func usageErrors(cmd *cli.Command, path string) {
	for _, sub := range cmd.Subcommands {
		usageErrors(sub, path+" "+sub.Name)
	}
	if cmd.OnUsageError == nil {
		cmd.OnUsageError = func(c *cli.Context, err error, _ bool) error {
			return usageError("%v; run '%s --help' for usage", err, path)
		}
	}
}

// refuseUnknownSubcommands gives every command of cmd's tree that has subcommands and no
// action of its own one that shows its help, or, given an argument that names none of
// them, fails as a usage error (exit 2). Without it the library's help action answers
// "No help topic" with its own exit status, 3.
func refuseUnknownSubcommands(cmd *cli.Command, path string) {
	for _, sub := range cmd.Subcommands {
		refuseUnknownSubcommands(sub, path+" "+sub.Name)
	}
	if len(cmd.Subcommands) == 0 || cmd.Action != nil {
		return
	}
	cmd.Action = func(c *cli.Context) error {
		if c.Args().Present() {
			return usageError("unknown command %q for '%s'; run '%s --help' for the list", c.Args().First(), path, path)
		}
		return cli.ShowSubcommandHelp(c)
	}
}

// run runs gonvmf with args (args[0] is the program name) and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, flagsFirst(app, args))
	if err == nil {
		return exitOK
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, "gonvmf:", msg)
		}
		if ec.ExitCode() == 3 { // the library's help command: "No help topic for ..."
			return exitUsage
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(stderr, "gonvmf:", err)
	return exitFailure
}

// setupLogging points log/slog's default logger at w, and keeps how it formats for
// logHandler.
func setupLogging(app *cli.App, w io.Writer, level, format string) error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return usageError("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var newHandler func(io.Writer) slog.Handler
	switch format {
	case "text":
		newHandler = func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, opts) }
	case "json":
		newHandler = func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, opts) }
	default:
		return usageError("--log-format %q: use text or json", format)
	}
	if app.Metadata == nil {
		app.Metadata = map[string]any{}
	}
	app.Metadata[logHandlerKey] = newHandler
	slog.SetDefault(slog.New(newHandler(w)))
	return nil
}

const logHandlerKey = "gonvmf.logHandler"

// logFlushTimeout bounds how long a command that ends waits for its log to reach a sink
// that does not take it.
const logFlushTimeout = 5 * time.Second

// asyncLogger makes the default logger write to the command's standard error through an
// asynclog.Writer, for a command whose latency-critical goroutines log (serve's poll
// groups): a slow standard error (journald under back-pressure, a full pipe) then drops
// lines, counted in a warning and by dropped, instead of stalling them. closeLog flushes
// what is buffered (at most logFlushTimeout) and makes later lines synchronous again; call
// it before the command returns.
func asyncLogger(c *cli.Context) (log *slog.Logger, dropped func() uint64, closeLog func()) {
	newHandler, ok := c.App.Metadata[logHandlerKey].(func(io.Writer) slog.Handler)
	if !ok { // Before did not run (no logging set up): nothing to make asynchronous
		return slog.Default(), func() uint64 { return 0 }, func() {}
	}
	aw := asynclog.New(c.App.ErrWriter, 0, func(w io.Writer, lines, bytes uint64) {
		slog.New(newHandler(w)).Warn("log lines dropped: standard error took them more slowly than gonvmf wrote them",
			"lines", lines, "bytes", bytes)
	})
	log = slog.New(newHandler(aw))
	slog.SetDefault(log)
	return log, aw.Dropped, func() {
		ctx, cancel := context.WithTimeout(context.Background(), logFlushTimeout)
		defer cancel()
		aw.Close(ctx) // on a timeout the sink is stuck: the process ends without those lines
	}
}
