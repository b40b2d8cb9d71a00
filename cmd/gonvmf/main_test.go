package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gonvmf/gonvmf/backend"
	"github.com/gonvmf/gonvmf/conf"
	"github.com/urfave/cli/v2"
)

// gonvmf runs the application in-process and returns its exit status and output.
func gonvmf(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"gonvmf"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func readFileString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckExamples(t *testing.T) {
	files, err := filepath.Glob("../../conf/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			code, out, errOut := gonvmf(t, "check", "--config", f)
			if strings.Contains(readFileString(t, f), "backend: rbd") && !backend.RBDAvailable {
				// A build without the rbd backend says which build serves the file.
				if code != 1 || !strings.Contains(errOut, "this gonvmf has no rbd backend; rbd needs the ceph build of gonvmf: build it with make build-ceph") {
					t.Errorf("check %s without the ceph build: exit %d\n%s", f, code, errOut)
				}
				return
			}
			if code != 0 {
				t.Fatalf("check %s: exit %d\n%s", f, code, errOut)
			}
			if !strings.Contains(errOut, f+": valid: ") || strings.Contains(errOut, "warning") {
				t.Errorf("stderr: %q", errOut)
			}
			// stdout is the resolved configuration and reads back as the same one.
			want, err := conf.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := conf.Parse([]byte(out), "stdout")
			if err != nil {
				t.Fatalf("check's output does not parse: %v\n%s", err, out)
			}
			if got.String() != strings.Replace(want.String(), "resolved from "+f, "resolved from stdout", 1) {
				t.Errorf("check printed\n%s\nwhich resolves to\n%s\nnot\n%s", out, got, want)
			}
		})
	}
}

const badConfig = `listeners:
  - address: 10.99.0.1
    port: 70000
subsystems:
  - nqn: nqn.2024-01.com.example:t
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: null
        size: 1GiB
        lba_size: 1024
      - nsid: 1
        backend: file
`

// TestCheckNothingServed: a file with no subsystems is valid (the control API adds them),
// and check says that it serves nothing yet.
func TestCheckNothingServed(t *testing.T) {
	f := writeFile(t, "empty.yaml", "listeners: [{address: 10.99.0.1}]\nsubsystems: []\n")
	code, _, errOut := gonvmf(t, "check", "-c", f)
	if code != 0 || !strings.Contains(errOut, f+": valid: 1 listener, 0 subsystems, 0 namespaces") ||
		!strings.Contains(errOut, "serves nothing until listeners and subsystems are added") {
		t.Errorf("check of a file with no subsystems: exit %d\n%s", code, errOut)
	}
}

func TestCheckReportsEveryError(t *testing.T) {
	f := writeFile(t, "bad.yaml", badConfig)
	code, out, errOut := gonvmf(t, "check", "-c", f)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if out != "" {
		t.Errorf("stdout for an invalid config: %q", out)
	}
	for _, want := range []string{
		f + ":3: listeners[0].port: 70000 is not a valid port; use a port from 1 to 65535",
		f + ":11: subsystems[0].namespaces[0].lba_size: 1024 is not a supported LBA size; use 512 or 4096",
		f + ":12: subsystems[0].namespaces[1].nsid: nsid 1 is already used by subsystems[0].namespaces[0] (line 8)",
		f + ":12: subsystems[0].namespaces[1].path: missing; file namespaces need the path",
		"gonvmf: " + f + ": 4 errors",
	} {
		if !strings.Contains(errOut, want+"") {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestCheckStaticSkipsTheMachine(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.img")
	f := writeFile(t, "file.yaml", `listeners: [{address: 10.99.0.1}]
subsystems:
  - nqn: nqn.2024-01.com.example:f
    allow_any_host: true
    namespaces:
      - {nsid: 1, backend: file, path: `+missing+`}
`)
	code, _, errOut := gonvmf(t, "check", "--config", f)
	if code != 1 || !strings.Contains(errOut, f+":6: subsystems[0].namespaces[0].path: "+missing+" does not exist, and no size is given") {
		t.Errorf("check: exit %d\n%s", code, errOut)
	}
	code, out, errOut := gonvmf(t, "check", "--static", "--config", f)
	if code != 0 || !strings.Contains(out, "path: "+missing) {
		t.Errorf("check --static: exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestCheckQuietAndEnv(t *testing.T) {
	t.Setenv("GONVMF_CONFIG", "../../conf/examples/null.yaml")
	code, out, errOut := gonvmf(t, "check", "-q")
	if code != 0 || out != "" || errOut != "" {
		t.Errorf("check -q: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestCheckWarnings(t *testing.T) {
	f := writeFile(t, "warn.yaml", "listeners: [{address: 10.99.0.1}]\nsubsystems:\n  - nqn: nqn.2024-01.com.example:w\n    allow_any_host: true\n")
	code, _, errOut := gonvmf(t, "check", "-c", f)
	if code != 0 || !strings.Contains(errOut, "warning: "+f+":3: subsystems[0].namespaces: the subsystem has no namespaces") {
		t.Errorf("exit %d\n%s", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check"}, "--config FILE is required"},
		{[]string{"serve"}, "--config FILE is required"},
		{[]string{"check", "x.yaml"}, `unexpected argument "x.yaml"; name the configuration with --config x.yaml`},
		{[]string{"chek"}, `unknown command "chek"`},
		{[]string{"ctl", "bogus"}, `unknown command "bogus" for 'gonvmf ctl'`},
		{[]string{"ctl", "ns", "bogus"}, `unknown command "bogus" for 'gonvmf ctl ns'`},
		{[]string{"help", "bogus"}, `No help topic for 'bogus'`},
		{[]string{"check", "--bogus"}, "flag provided but not defined: -bogus"},
		// Every level of ctl's tree, down to its leaves, says which command's help to read.
		{[]string{"ctl", "--bogus"}, "flag provided but not defined: -bogus; run 'gonvmf ctl --help' for usage"},
		{[]string{"ctl", "ns", "--bogus"}, "flag provided but not defined: -bogus; run 'gonvmf ctl ns --help' for usage"},
		{[]string{"ctl", "subsystem", "ls", "--bogus"}, "flag provided but not defined: -bogus; run 'gonvmf ctl subsystem ls --help' for usage"},
		{[]string{"ctl", "host", "key", "set", "--dhchap-secrets", "x", "h"}, "run 'gonvmf ctl host key set --help' for usage"},
		{[]string{"ctl", "ns", "add", "--nsid", "one", "n"}, `invalid value "one" for flag -nsid`},
		{[]string{"ctl", "save", "-o"}, "flag needs an argument: -o"},
		{[]string{"--bogus", "version"}, "flag provided but not defined: -bogus"},
		{[]string{"--log-level", "loud", "version"}, `--log-level "loud": use debug, info, warn or error`},
		{[]string{"--log-format", "xml", "version"}, `--log-format "xml": use text or json`},
		{[]string{"version", "extra"}, "version takes no arguments"},
		{[]string{"identify", "-a", "10.99.0.1", "-n", "nqn.2024-01.io.gonvmf:x", "-C", "DHHC-1:00:x:"}, "-C/--dhchap-ctrl-secret needs -S/--dhchap-secret too"},
		{[]string{"discover", "-a", "10.99.0.1", "--dhchap-secret", "DHHC-1:01:AAAA:"}, "--dhchap-secret: dhchap: the secret's base64 decodes to 3 bytes"},
	} {
		code, out, errOut := gonvmf(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("gonvmf %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
		if out != "" {
			t.Errorf("gonvmf %s: a usage error printed to standard output:\n%s", strings.Join(tc.args, " "), out)
		}
	}
}

func TestMissingConfigFile(t *testing.T) {
	code, _, errOut := gonvmf(t, "check", "-c", "/nonexistent/gonvmf.yaml")
	if code != 1 || !strings.Contains(errOut, "open /nonexistent/gonvmf.yaml") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestVersionAndHelp(t *testing.T) {
	code, out, _ := gonvmf(t, "version")
	if code != 0 || !strings.HasPrefix(out, "gonvmf ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version: exit %d, %q", code, out)
	}
	if want := map[bool]string{true: "\nbackends: file block null memory rbd (the ceph build)\n",
		false: "\nbackends: file block null memory (no rbd: make build-ceph builds it)\n"}[backend.RBDAvailable]; !strings.Contains(out, want) {
		t.Errorf("version: %q lacks %q", out, want)
	}
	code, out, _ = gonvmf(t, "--help")
	for _, cmd := range []string{"check", "serve", "version", "--log-level"} {
		if code != 0 || !strings.Contains(out, cmd) {
			t.Errorf("help lacks %s (exit %d):\n%s", cmd, code, out)
		}
	}
	// Every command is in help, in alphabetical order, and in the package documentation.
	doc, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	for _, newCommand := range commands {
		name := newCommand().Name
		i := strings.Index(out, "\n   "+name+" ")
		if i < 0 || i < last {
			t.Errorf("help lists %s out of order or not at all:\n%s", name, out)
		}
		last = i
		if !strings.Contains(string(doc), "//\tgonvmf "+name+" ") {
			t.Errorf("main.go's package documentation does not list gonvmf %s", name)
		}
	}
}

func TestJSONLogging(t *testing.T) {
	_, _, errOut := gonvmf(t, "--log-format", "json", "serve", "-c", "../../conf/examples/null.yaml")
	if !strings.Contains(errOut, `"msg":"configuration loaded"`) {
		t.Errorf("stderr: %s", errOut)
	}
	_, _, errOut = gonvmf(t, "--log-level", "error", "serve", "-c", "../../conf/examples/null.yaml")
	if strings.Contains(errOut, "configuration loaded") {
		t.Errorf("info logged at --log-level error: %s", errOut)
	}
}

// TestBinary builds gonvmf with a version stamped in by -ldflags and runs it as a user
// would: real exit statuses, real output streams.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "gonvmf")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-ldflags", "-X main.version=v0.0.0-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "gonvmf v0.0.0-test ") {
		t.Errorf("version: %q %v", out, err)
	}
	cmd := exec.Command(bin, "check", "--config", writeFile(t, "bad.yaml", badConfig))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), ": 4 errors") {
		t.Errorf("check of a bad config: %v\n%s", err, stderr.String())
	}
	if err := exec.Command(bin, "check", "-q", "-c", "../../conf/examples/null.yaml").Run(); err != nil {
		t.Errorf("check of an example: %v", err)
	}
	err = exec.Command(bin, "nonsense").Run()
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("unknown command: %v", err)
	}
}

// TestHelpDefaults: no command's help shows a flag's zero value as its default where the
// zero stands for something else (a required flag, "the first", "from the clock") or is
// not a valid value (--cntlid-min 0), nor two defaults for one flag; the defaults that
// are not zero are shown.
func TestHelpDefaults(t *testing.T) {
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(slices.Clone(path), c.Name)
			walk(p, c.Subcommands)
			code, out, errOut := gonvmf(t, append(p, "--help")...)
			if code != 0 {
				t.Errorf("gonvmf %s --help: exit %d\n%s", strings.Join(p, " "), code, errOut)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "(default: 0)") || strings.Contains(line, "(default: 0s)") || strings.Count(line, "(default") > 1 {
					t.Errorf("gonvmf %s --help:%s", strings.Join(p, " "), line)
				}
			}
		}
	}
	walk(nil, newApp(io.Discard, io.Discard).Commands)
	for args, want := range map[string]string{
		"ctl subsystem add": "handed out (two targets serving one subsystem need disjoint ranges) (default: 1)",
		"ctl ns add":        "file, block, null, memory or rbd (required; rbd: the ceph build, the image named by --rbd-pool and --rbd-image)",
		"perf":              "random SEED (default: from the clock)",
	} {
		if _, out, _ := gonvmf(t, append(strings.Fields(args), "--help")...); !strings.Contains(out, want) {
			t.Errorf("gonvmf %s --help lacks %q:\n%s", args, want, out)
		}
	}
}
