package main

// Specification of the driver's layer order (layers.txt, docs/how-it-works.md): no production
// file calls a function of a file above its own layer, and every file that declares a function
// has a place in the order. A new call up, or a new file left out, fails `go test ./...`.

import "testing"

func TestNoCallGoesUpTheLayerOrder(t *testing.T) {
	p, err := load("../..")
	if err != nil {
		t.Fatal(err)
	}
	up, err := p.callsUp("layers.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range up {
		t.Errorf("a call up the layer order (layers.txt): %s", c)
	}
	if len(p.decls) < 100 {
		t.Fatalf("read %d functions of the driver's package, want its whole production code", len(p.decls))
	}
}
