package proxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestNoSideDoors: the proxy finds nothing of the engine by type
// assertion. What it needs is the Locker's methods and the collaborators
// of Config; an assertion to an interface declared here (the optional
// interfaces of before), to a wrapper of the Locker, or to a type of the
// engine's packages would be a side door that a wrapper can silently
// close.
func TestNoSideDoors(t *testing.T) {
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	// The seam's own types: every interface declared here, and the
	// Locker's wrappers.
	forbidden := map[string]bool{"keyspace": true, "observedLocker": true, "sessionLocker": true, "trackedLocker": true}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if _, isInterface := ts.Type.(*ast.InterfaceType); isInterface {
					forbidden[ts.Name.Name] = true
				}
			}
			return true
		})
	}
	if !forbidden["Locker"] || !forbidden["Lister"] {
		t.Fatalf("the seam's interfaces were not found: %v", forbidden)
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			ta, ok := n.(*ast.TypeAssertExpr)
			if !ok || ta.Type == nil {
				return true
			}
			typ := ta.Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			var what string
			switch x := typ.(type) {
			case *ast.Ident:
				if forbidden[x.Name] {
					what = x.Name
				}
			case *ast.SelectorExpr:
				if pkg, ok := x.X.(*ast.Ident); ok && (pkg.Name == "quorum" || pkg.Name == "shard") {
					what = pkg.Name + "." + x.Sel.Name
				}
			}
			if what != "" {
				t.Errorf("%s: a type assertion to %s: a side door past the seam", fset.Position(ta.Pos()), what)
			}
			return true
		})
	}
}
