package main

import (
	"fmt"
	"io"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/urfave/cli/v2"
)

// configFlag is the --config flag shared by the commands that read a configuration.
func configFlag() *cli.StringFlag {
	return &cli.StringFlag{
		Name:    "config",
		Aliases: []string{"c"},
		Usage:   "read the configuration from `FILE` (see conf/README.md)",
		EnvVars: []string{"GONVMF_CONFIG"},
	}
}

// loadConfig loads and validates the file named by --config and, when system is set,
// checks it against this machine (backing files, devices, memory). On failure it prints
// every problem and a summary to stderr and returns the error to return from the command.
func loadConfig(c *cli.Context, system bool) (*conf.Config, error) {
	if c.Args().Present() {
		return nil, usageError("unexpected argument %q; name the configuration with --config %s", c.Args().First(), c.Args().First())
	}
	path := c.String("config")
	if path == "" {
		return nil, usageError("--config FILE is required")
	}
	stderr := c.App.ErrWriter
	cfg, err := conf.Load(path)
	if err == nil {
		err = cfg.CheckBackends(missingBackends())
	}
	if err == nil && system {
		err = cfg.CheckSystem()
	}
	if err != nil {
		reportConfigErrors(stderr, path, err)
		return nil, failed
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	return cfg, nil
}

// missingBackends names the backends this build of gonvmf lacks, with the fix.
func missingBackends() map[string]string {
	if backend.RBDAvailable {
		return nil
	}
	return map[string]string{conf.BackendRBD: "rbd needs the ceph build of gonvmf: build it with make build-ceph " +
		"(go build -tags ceph,pacific; needs Debian's librbd-dev and librados-dev)"}
}

// reportConfigErrors prints configuration errors one per line, then a count.
func reportConfigErrors(w io.Writer, path string, err error) {
	errs := conf.Errors(err)
	if len(errs) == 0 { // not a validation error: the file could not be read
		fmt.Fprintln(w, "gonvmf:", err)
		return
	}
	for _, e := range errs {
		fmt.Fprintln(w, e)
	}
	plural := "s"
	if len(errs) == 1 {
		plural = ""
	}
	fmt.Fprintf(w, "gonvmf: %s: %d error%s\n", path, len(errs), plural)
}
