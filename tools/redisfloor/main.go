// Command redisfloor is the floor of a Redis front end's cost in Go: the
// simplest server that answers GET and SET from a map, either with a
// goroutine per connection reading with redcon (the shape of
// internal/resp) or on event loops (gnet, epoll), for run.sh to measure
// against redis-server under redis-benchmark. It holds nothing of
// Catena: what it costs per command, any front end in Go pays before it
// does any work. It is a module of its own, so Catena does not depend on
// gnet.
package main

import (
	"bufio"
	"flag"
	"log"
	"net"
	"strings"
	"sync"

	"github.com/panjf2000/gnet/v2"
	"github.com/tidwall/redcon"
)

var (
	mu sync.RWMutex
	m  = map[string][]byte{}
)

func answer(out []byte, args [][]byte) []byte {
	switch strings.ToLower(string(args[0])) {
	case "get":
		mu.RLock()
		v, ok := m[string(args[1])]
		mu.RUnlock()
		if !ok {
			return redcon.AppendNull(out)
		}
		return redcon.AppendBulk(out, v)
	case "set":
		mu.Lock()
		m[string(args[1])] = append([]byte(nil), args[2]...)
		mu.Unlock()
		return redcon.AppendOK(out)
	case "ping":
		return redcon.AppendString(out, "PONG")
	case "config":
		return redcon.AppendArray(out, 0)
	}
	return redcon.AppendError(out, "ERR unknown")
}

func goroutines(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		nc, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			defer nc.Close()
			rd := redcon.NewReader(nc)
			w := bufio.NewWriterSize(nc, 16<<10)
			var out []byte
			for {
				cmds, err := rd.ReadCommands()
				if err != nil {
					return
				}
				out = out[:0]
				for _, c := range cmds {
					out = answer(out, c.Args)
				}
				w.Write(out)
				if w.Flush() != nil {
					return
				}
			}
		}()
	}
}

type loops struct {
	gnet.BuiltinEventEngine
}

type connState struct {
	buf  []byte
	args [][]byte
	out  []byte
}

func (loops) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	c.SetContext(&connState{})
	return nil, gnet.None
}

func (loops) OnTraffic(c gnet.Conn) gnet.Action {
	st := c.Context().(*connState)
	in, _ := c.Next(-1)
	st.buf = append(st.buf, in...)
	st.out = st.out[:0]
	for len(st.buf) > 0 {
		complete, args, _, leftover, err := redcon.ReadNextCommand(st.buf, st.args[:0])
		if err != nil {
			return gnet.Close
		}
		if !complete {
			break
		}
		st.args = args
		st.out = answer(st.out, args)
		st.buf = leftover
	}
	st.buf = append(st.buf[:0:0], st.buf...)
	if len(st.out) > 0 {
		c.Write(st.out)
	}
	return gnet.None
}

func main() {
	kind := flag.String("kind", "goroutines", "goroutines or gnet")
	addr := flag.String("addr", "127.0.0.1:7700", "")
	flag.Parse()
	if *kind == "gnet" {
		log.Fatal(gnet.Run(&loops{}, "tcp://"+*addr, gnet.WithMulticore(true)))
	}
	goroutines(*addr)
}
