package rdmacm

import (
	"bytes"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// apiOf returns the exported API (types, functions, methods with their
// signatures) of the package's files selected by ctx.
func apiOf(t *testing.T, ctx build.Context) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	api := map[string]string{}
	typeStr := func(e ast.Expr) string {
		var b bytes.Buffer
		printer.Fprint(&b, fset, e)
		return b.String()
	}
	fields := func(fl *ast.FieldList) string {
		if fl == nil {
			return ""
		}
		var parts []string
		for _, f := range fl.List {
			n := max(1, len(f.Names))
			for range n {
				parts = append(parts, typeStr(f.Type))
			}
		}
		return strings.Join(parts, ", ")
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := ctx.MatchFile(".", name); err != nil {
			t.Fatal(err)
		} else if !ok {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				key := d.Name.Name
				if d.Recv != nil {
					recv := strings.TrimPrefix(typeStr(d.Recv.List[0].Type), "*")
					if !ast.IsExported(recv) {
						continue
					}
					key = recv + "." + key
				}
				api[key] = "func(" + fields(d.Type.Params) + ") (" + fields(d.Type.Results) + ")"
			case *ast.GenDecl:
				if d.Tok != token.TYPE {
					continue
				}
				for _, s := range d.Specs {
					if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
						api["type "+ts.Name.Name] = name
					}
				}
			}
		}
	}
	return api
}

// TestStubMatchesAPI: builds without RDMA (nordma, no cgo) have exactly the
// API of the real implementation, so code using the package builds
// everywhere.
func TestStubMatchesAPI(t *testing.T) {
	real := build.Default
	real.GOOS, real.CgoEnabled, real.BuildTags = "linux", true, nil
	want := apiOf(t, real)
	if _, ok := want["OpenDevice"]; !ok {
		t.Fatalf("the real implementation's API was not found: %v", want)
	}
	for _, c := range []struct {
		name string
		ctx  build.Context
	}{
		{"-tags nordma", func() build.Context { c := real; c.BuildTags = []string{"nordma"}; return c }()},
		{"CGO_ENABLED=0", func() build.Context { c := real; c.CgoEnabled = false; return c }()},
		{"GOOS=darwin", func() build.Context { c := real; c.GOOS = "darwin"; return c }()},
	} {
		got := apiOf(t, c.ctx)
		var diffs []string
		for k, v := range want {
			if strings.HasPrefix(k, "type ") {
				if _, ok := got[k]; !ok {
					diffs = append(diffs, "missing "+k)
				}
				continue
			}
			if got[k] != v {
				diffs = append(diffs, k+": real "+v+", stub "+got[k])
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				diffs = append(diffs, "only in the stub: "+k)
			}
		}
		slices.Sort(diffs)
		for _, d := range diffs {
			t.Errorf("%s: %s", c.name, d)
		}
	}
}
