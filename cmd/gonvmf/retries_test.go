package main

import (
	"strings"
	"testing"

	"github.com/gonvmf/gonvmf/initiator"
	"github.com/urfave/cli/v2"
)

// TestPerfMaxRetriesFlag: perf's --max-retries (default 5, 0..255) refuses a count out of
// range with a usage error that names the flag and the range, before it connects.
func TestPerfMaxRetriesFlag(t *testing.T) {
	cfg := writeFile(t, "loop.yaml", loopConfig)
	for _, n := range []string{"-1", "256"} {
		code, out, errOut := gonvmf(t, "--log-level", "error", "perf", "-t", "loop", "-c", cfg, "--max-retries", n)
		want := "--max-retries " + n + ": want 0..255 retries of a failed I/O command (0: fail it at its first error)"
		if code != 2 || !strings.Contains(errOut, want) || out != "" {
			t.Errorf("perf --max-retries %s: exit %d, stderr %q, stdout %q; want exit 2 and %q", n, code, errOut, out, want)
		}
	}
}

// TestPerfMaxRetriesOption: --max-retries becomes initiator.Options.MaxRetries: absent,
// the Linux host's 5; 0, no retries (MaxRetries negative, since 0 there means the
// default); N, N.
func TestPerfMaxRetriesOption(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, initiator.DefaultMaxRetries},
		{[]string{"--max-retries", "0"}, -1},
		{[]string{"--max-retries", "3"}, 3},
		{[]string{"--max-retries", "255"}, 255},
	} {
		cmd := perfCommand()
		got := 0
		cmd.Action = func(c *cli.Context) error {
			pf, err := parsePerf(c)
			if err == nil {
				got = pf.maxRetries
			}
			return err
		}
		app := &cli.App{Name: "gonvmf", Commands: []*cli.Command{cmd}}
		if err := app.Run(append([]string{"gonvmf", "perf"}, tc.args...)); err != nil {
			t.Fatalf("perf %v: %v", tc.args, err)
		}
		if got != tc.want {
			t.Errorf("perf %v: Options.MaxRetries %d, want %d", tc.args, got, tc.want)
		}
	}
}
