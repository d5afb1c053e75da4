//go:build catena_next_protocol

package release

// A build with -tags catena_next_protocol plays the next release for
// upgrade tests (internal/integration's TestUpgradeFinalizeAndNoWayBack):
// it speaks one protocol version more than this release, a version that
// brings nothing yet, so that a real cluster can be upgraded to it,
// finalized, and shown to refuse the older build afterwards. Never
// shipped.

// Version is this test build's release.
const Version = "0.2.0+next-protocol"

// ProtocolMax is one more than the release's.
const ProtocolMax uint32 = 3
