package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "validate a configuration file and print it with all defaults filled in",
		Description: `check reads the configuration strictly (unknown fields are errors), fills in the
defaults and the derived namespace identifiers, and validates it. Unless --static is
given it also checks this machine: backing files and block devices exist and fit,
memory namespaces fit in RAM, the buffer pool can be pinned, hosts' secret files are
valid and closed to others. These checks run at once, and check waits for them at
most 10 s: a file or device that does not answer by then (on a hung NFS or FUSE
mount) is an error on its field.

Every problem is printed to standard error as FILE:LINE: FIELD: PROBLEM; FIX and the
exit status is 1. A valid configuration is printed to standard output as YAML that
gonvmf reads back unchanged, with sizes for people in comments.`,
		Flags: []cli.Flag{
			configFlag(),
			&cli.BoolFlag{Name: "static", Usage: "check the file only, not the backing files, devices and memory of this machine"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print nothing when the configuration is valid"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c, !c.Bool("static"))
			if err != nil {
				return err
			}
			if c.Bool("quiet") {
				return nil
			}
			fmt.Fprint(c.App.Writer, cfg)
			namespaces := 0
			for _, s := range cfg.Subsystems {
				namespaces += len(s.Namespaces)
			}
			fmt.Fprintf(c.App.ErrWriter, "%s: valid: %s, %s, %s\n", cfg.File,
				count(len(cfg.Listeners), "listener"), count(len(cfg.Subsystems), "subsystem"), count(namespaces, "namespace"))
			if len(cfg.Listeners) == 0 || len(cfg.Subsystems) == 0 {
				fmt.Fprintf(c.App.ErrWriter, "%s: serves nothing until listeners and subsystems are added (gonvmf ctl, or the file and SIGHUP)\n", cfg.File)
			}
			return nil
		},
	}
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
