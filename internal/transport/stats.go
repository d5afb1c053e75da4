package transport

import (
	"net"
	"sync/atomic"
)

// What a transport counts of its traffic, for metrics.

// Stats counts a transport's traffic since it started, for metrics.
type Stats struct {
	// BytesSent and BytesReceived count bytes written to and read from
	// connections, framing and hellos included.
	BytesSent, BytesReceived uint64
	// Reconnects counts connections to listening peers re-established
	// after one broke (each delivers a PeerReset).
	Reconnects uint64
	// DialFailures counts failed attempts to connect to a listening peer.
	DialFailures uint64
	// Overflows counts connections reset because the peer did not keep up
	// and its queue was full (queueMessagesMax).
	Overflows uint64
	// InFlightRefused counts client messages refused because their
	// connection had as many waiting as WithClientInFlightMax allows.
	InFlightRefused uint64
	// Incompatible counts links refused, dialed or accepted, because the
	// peer speaks no protocol version this node speaks.
	Incompatible uint64
}

type counters struct {
	bytesSent, bytesReceived, reconnects, dialFailures, overflows, inFlightRefused, incompatible atomic.Uint64
}

// Stats returns the transport's counters. Safe for concurrent use.
func (t *Transport) Stats() Stats {
	return Stats{
		BytesSent: t.stats.bytesSent.Load(), BytesReceived: t.stats.bytesReceived.Load(),
		Reconnects: t.stats.reconnects.Load(), DialFailures: t.stats.dialFailures.Load(),
		Overflows: t.stats.overflows.Load(), InFlightRefused: t.stats.inFlightRefused.Load(),
		Incompatible: t.stats.incompatible.Load(),
	}
}

// countedConn counts the bytes that pass through a connection.
type countedConn struct {
	net.Conn
	stats *counters
}

func (c countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.stats.bytesReceived.Add(uint64(n))
	return n, err
}

func (c countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.stats.bytesSent.Add(uint64(n))
	return n, err
}
