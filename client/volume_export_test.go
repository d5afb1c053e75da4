package client_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/wire"
)

// An export reads one frozen state page by page, kept while its reader
// is away (KeepAlive); when the volume's tail fails mid-read, the new
// tail freezes a new state and the export starts the volume over
// (Restart), ending with every key.
func TestExportKeepsItsStateAndStartsOverOnANewTail(t *testing.T) {
	c, cl := start(t)
	ctx := testCtx(t)
	n := wire.ExportPageObjects + 100
	for i := range n {
		putUntil(t, cl, fmt.Sprintf("k%05d", i), []byte("v"), waitFor)
	}
	readAll := func(x *client.Export) (keys []string, restarts int) {
		t.Helper()
		for more := true; more; {
			p, m, err := x.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if p.Restart {
				keys, restarts = nil, restarts+1
			}
			for _, o := range p.Objects {
				keys = append(keys, o.Key)
			}
			more = m
		}
		return keys, restarts
	}

	x := cl.NewExport(0)
	first, more, err := x.Next(ctx)
	if err != nil || !more || len(first.Objects) != wire.ExportPageObjects || first.Restart {
		t.Fatalf("first page: %d objects, more %v, restart %v, %v", len(first.Objects), more, first.Restart, err)
	}
	if err := cl.Put(ctx, "zz-after", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := x.KeepAlive(ctx); err != nil {
		t.Fatal(err)
	}
	rest, restarts := readAll(x)
	if restarts != 0 || slices.Contains(rest, "zz-after") || len(first.Objects)+len(rest) < n {
		t.Errorf("the rest of a frozen export: %d keys, %d restarts, holds a later write: %v", len(rest), restarts, slices.Contains(rest, "zz-after"))
	}
	if _, _, err := x.Next(ctx); err == nil {
		t.Error("Next after the last page succeeded")
	}

	y := cl.NewExport(0)
	if _, _, err := y.Next(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	chain := st.Volumes[0].Chain
	c.Stop(slices.Index(c.ServerAddrs(), chain[len(chain)-1]))
	keys, restarts := readAll(y)
	if restarts != 1 || !slices.Contains(keys, "k00000") || !slices.Contains(keys, "zz-after") || len(keys) < n+1 || !slices.IsSorted(keys) {
		t.Errorf("an export across its tail's failure: %d keys, %d restarts", len(keys), restarts)
	}
}
