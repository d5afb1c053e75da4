package storage

import (
	"fmt"
	"testing"

	"github.com/catena-kv/catena/internal/kv"
	"github.com/catena-kv/catena/internal/wire"
)

// BenchmarkPebbleExportPage reads a volume of 50,000 objects of 1000
// bytes (most flushed out of the memtable) page by page from one export,
// and encodes each page as the tail does (chain's handleExport): what
// one OpExport costs the tail's event loop, with the wire's page limits
// and smaller ones.
func BenchmarkPebbleExportPage(b *testing.B) {
	e := openPebble(b, PebbleOptions{Dir: b.TempDir(), MemTableBytes: 8 << 20})
	defer closePebble(b, e)
	s := e.Volume(0)
	const keys = 50000
	value := make([]byte, 1000)
	for i := range keys {
		for j := range value {
			value[j] = byte('a' + (i+j)%26)
		}
		s.Set(fmt.Sprintf("user%07d", i), kv.Object{Value: value, Exists: true})
		if i%1000 == 999 {
			if err := e.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := e.Commit(); err != nil {
		b.Fatal(err)
	}
	for _, limits := range []struct{ objects, bytes int }{
		{wire.ExportPageObjects, wire.ExportPageBytes}, {256, 64 << 10}, {64, 16 << 10},
	} {
		b.Run(fmt.Sprintf("page=%dKiB", limits.bytes>>10), func(b *testing.B) {
			x := s.Export()
			defer x.Close()
			from, pages, size := "", 0, 0
			b.ReportAllocs()
			for b.Loop() {
				objects, more := x.Page(from, limits.objects, limits.bytes)
				page := wire.ExportPage{SN: x.Applied(), Objects: make([]wire.ExportObject, 0, len(objects)), More: more}
				for _, o := range objects {
					page.Objects = append(page.Objects, wire.ExportObject{Key: o.Key, Value: o.Object.Value, Expires: o.Object.Expires, Type: o.Object.Type})
				}
				size += len(wire.EncodeExportPage(page))
				pages++
				from = wire.ScanAfter(objects[len(objects)-1].Key)
				if !more {
					from = ""
				}
			}
			b.ReportMetric(float64(size)/float64(pages)/1024, "KiB/page")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(size)*(1<<20)/1e6, "ms/MiB")
		})
	}
}
