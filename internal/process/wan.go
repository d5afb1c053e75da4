package process

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/transport"
	"github.com/catena-kv/catena/internal/wire"
)

// WAN emulates a wide-area network between sites on one machine
// (catena dev -sites, tests): every message to a listed peer leaves
// RTT/2 ± Jitter/2 after it was sent, FIFO per link
// (transport.SetLinkDelays). A real deployment has a real WAN and sets
// none of it.
type WAN struct {
	RTT, Jitter time.Duration
	// Peers are the processes of the other sites (their masters and
	// servers); messages to any other peer are not delayed.
	Peers []wire.NodeID
	// CutFile is a test hook for partitions between sites: the process
	// reads the file every wanCutPoll and is cut off from the addresses
	// it lists (transport.SetCut) until they are gone from it or it is
	// removed.
	CutFile string
}

// wanCutPoll is how often WAN.CutFile is read.
const wanCutPoll = 100 * time.Millisecond

func (w WAN) validate() error {
	switch {
	case w.RTT < 0 || w.Jitter < 0 || w.Jitter > w.RTT:
		return errors.New("WAN: RTT and Jitter must not be negative, nor Jitter above RTT")
	case w.RTT > 0 && len(w.Peers) == 0:
		return errors.New("WAN: RTT needs Peers")
	}
	return nil
}

// apply sets the transport's link delays and watches the cut file; call
// it before the transport sends anything. The watch ends with done.
func (w WAN) apply(tr *transport.Transport, log *slog.Logger, done <-chan struct{}) {
	if w.CutFile != "" {
		go watchCutFile(w.CutFile, tr, log, done)
	}
	if w.RTT == 0 {
		return
	}
	remote := map[wire.NodeID]bool{}
	for _, id := range w.Peers {
		remote[id] = true
	}
	d := transport.LinkDelay{OneWay: w.RTT / 2, Jitter: w.Jitter / 2}
	tr.SetLinkDelays(func(peer wire.NodeID) transport.LinkDelay {
		if remote[peer] {
			return d
		}
		return transport.LinkDelay{}
	})
}

// watchCutFile cuts the transport off from the addresses listed in path
// (WAN.CutFile), reading it every wanCutPoll until done is closed.
func watchCutFile(path string, tr *transport.Transport, log *slog.Logger, done <-chan struct{}) {
	var current string
	for {
		data, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("cannot read -wan-cut-file", "file", path, "err", err)
		}
		peers := strings.Fields(strings.ReplaceAll(string(data), ",", " "))
		if list := strings.Join(peers, ","); list != current {
			current = list
			if len(peers) == 0 {
				tr.SetCut(nil)
				log.Warn("emulated partition lifted (-wan-cut-file)")
			} else {
				cut := map[wire.NodeID]bool{}
				for _, p := range peers {
					cut[wire.NodeID(p)] = true
				}
				tr.SetCut(func(peer wire.NodeID) bool { return cut[peer] })
				log.Warn("emulated partition: cut off from peers (-wan-cut-file)", "peers", list)
			}
		}
		select {
		case <-done:
			return
		case <-time.After(wanCutPoll):
		}
	}
}
