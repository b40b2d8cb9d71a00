package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/urfave/cli/v2"
)

// version is set at build time with
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/gonvmf
//
// Without it the module version from the build information is used ("(devel)" for a
// build from a checkout).
var version string

// versionString is "v1.2.3 (commit 0123456789ab, 2026-01-02T03:04:05Z, modified) go1.26.1 linux/amd64";
// the parenthesis appears only when the build recorded version control information.
func versionString() string {
	v := version
	var commit, when, modified string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = ", modified"
				}
			}
		}
	}
	if v == "" {
		v = "(unknown)"
	}
	out := v
	if commit != "" {
		if len(commit) > 12 {
			commit = commit[:12]
		}
		out += fmt.Sprintf(" (commit %s", commit)
		if when != "" {
			out += ", " + when
		}
		out += modified + ")"
	}
	return out + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version of gonvmf",
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageError("version takes no arguments")
			}
			fmt.Fprintln(c.App.Writer, "gonvmf", versionString())
			fmt.Fprintln(c.App.Writer, "backends:", backendsString())
			return nil
		},
	}
}

// backendsString lists the namespace backends of this build.
func backendsString() string {
	if backend.RBDAvailable {
		return "file block null memory rbd (the ceph build)"
	}
	return "file block null memory (no rbd: make build-ceph builds it)"
}
