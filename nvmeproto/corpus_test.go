package nvmeproto

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// seedCorpora lists the seeds of every fuzz target; TestWriteSeedCorpus writes them to
// testdata/fuzz so that `go test` runs them as regression inputs even without -fuzz, and
// TestSeedCorpusComplete fails if a Fuzz function has no entry here or no files there.
func seedCorpora() map[string][][]byte {
	return map[string][][]byte{
		"FuzzCommand":            seedCommand(),
		"FuzzCompletion":         seedCompletion(),
		"FuzzConnectData":        seedConnectData(),
		"FuzzIdentifyController": seedIdentifyController(),
		"FuzzIdentifyNamespace":  seedIdentifyNamespace(),
		"FuzzIdentifyMisc":       seedIdentifyMisc(),
		"FuzzNSDescriptorList":   seedNSDescriptorList(),
		"FuzzNSIDList":           seedNSIDList(),
		"FuzzControllerList":     seedControllerList(),
		"FuzzRDMACM":             seedRDMACM(),
		"FuzzDiscoveryLog":       seedDiscoveryLog(),
		"FuzzLogPages":           seedLogPages(),
		"FuzzFeatureData":        seedFeatureData(),
		"FuzzDSMRanges":          seedDSMRanges(),
		"FuzzSGLDescriptor":      seedSGLDescriptor(),
		"FuzzAuthMessage":        seedAuthMessage(),
		"FuzzAuthNegotiate":      seedAuthNegotiate(),
		"FuzzAuthChallenge":      seedAuthChallenge(),
		"FuzzAuthReply":          seedAuthReply(),
		"FuzzAuthSuccess1":       seedAuthSuccess1(),
		"FuzzAuthSuccess2":       seedAuthSuccess2(),
		"FuzzAuthFailure":        seedAuthFailure(),
		"FuzzReservation":        seedReservation(),
	}
}

// Seeds for the lead's FuzzCommand / FuzzCompletion targets in command_test.go.
func seedCommand() [][]byte {
	var c Command
	(&ConnectCommand{QID: 1, SQSize: 127, KATO: 5000}).ToCommand(&c)
	c.CID = 7
	c.Flags = PSDTSGL << 6
	c.SGL = SGLDescriptor{Address: 0x1000, Length: 1024, Key: 0x1234, Type: SGLTypeKeyedDataBlock}
	b := make([]byte, SQESize)
	c.Marshal(b)
	rd := make([]byte, SQESize)
	(&Command{Opcode: OpRead, CID: 9, NSID: 1, CDW10: 100, CDW12: 7,
		SGL: SGLDescriptor{Type: SGLTypeDataBlock, Subtype: SGLSubtypeOffset, Length: 4096}}).Marshal(rd)
	return [][]byte{b, rd, make([]byte, 63), bytes.Repeat([]byte{0xFF}, SQESize)}
}

func seedCompletion() [][]byte {
	b := make([]byte, CQESize)
	(&Completion{DW0: 1, SQHD: 3, CID: 9, Status: StatusConnectInvalidParameters.WithDNR()}).Marshal(b)
	return [][]byte{b, make([]byte, 15), bytes.Repeat([]byte{0xFF}, CQESize)}
}

// TestWriteSeedCorpus regenerates testdata/fuzz/<FuzzName>/seed-N from seedCorpora.
// It runs only with GONVMF_WRITE_CORPUS=1.
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("GONVMF_WRITE_CORPUS") != "1" {
		t.Skip("set GONVMF_WRITE_CORPUS=1 to rewrite testdata/fuzz seed corpora")
	}
	for name, seeds := range seedCorpora() {
		dir := filepath.Join("testdata", "fuzz", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(s)))
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSeedCorpusComplete finds every Fuzz function in this package's test files and
// checks it has seeds registered and checked in, and that fuzz names are unique.
func TestSeedCorpusComplete(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := map[string]string{}
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Fuzz") {
				continue
			}
			if prev, dup := seen[fn.Name.Name]; dup {
				t.Errorf("%s declared in %s and %s", fn.Name.Name, prev, file)
			}
			seen[fn.Name.Name] = file
		}
	}
	corpora := seedCorpora()
	var names []string
	for name := range seen {
		names = append(names, name)
		if len(corpora[name]) == 0 {
			t.Errorf("%s has no seeds in seedCorpora", name)
		}
		entries, err := os.ReadDir(filepath.Join("testdata", "fuzz", name))
		if err != nil || len(entries) == 0 {
			t.Errorf("%s has no checked-in corpus in testdata/fuzz/%s (run GONVMF_WRITE_CORPUS=1 go test -run TestWriteSeedCorpus)", name, name)
		}
	}
	sort.Strings(names)
	t.Logf("%d fuzz targets: %s", len(names), strings.Join(names, " "))
}
