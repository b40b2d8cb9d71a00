package main

import (
	"errors"
	"log/slog"

	"github.com/urfave/cli/v2"
)

func init() { registerCommand(serveCommand) }

// errNoTransport is what serve reports until the RDMA transport exists.
var errNoTransport = errors.New("the RDMA transport is not implemented yet")

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the NVMe-oF target described by a configuration file",
		Flags: []cli.Flag{configFlag()},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c, true)
			if err != nil {
				return err
			}
			namespaces := 0
			for _, s := range cfg.Subsystems {
				namespaces += len(s.Namespaces)
			}
			slog.Info("configuration loaded", "file", cfg.File, "listeners", len(cfg.Listeners),
				"subsystems", len(cfg.Subsystems), "namespaces", namespaces)
			// The target engineer replaces this with the target's start-up.
			return cli.Exit(errNoTransport.Error(), exitFailure)
		},
	}
}
