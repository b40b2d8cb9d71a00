package nvmeproto

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// seedCorpora lists the seeds of every fuzz target; TestWriteSeedCorpus writes them to
// testdata/fuzz so that `go test` runs them as regression inputs even without -fuzz.
func seedCorpora() map[string][][]byte {
	return map[string][][]byte{
		"FuzzConnectData": seedConnectData(),
	}
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
