//go:build !catena_next_protocol

package release

// Version is this release's semantic version number. Raise it with every
// release, and add the release to CHANGELOG.md.
const Version = "0.1.0"

// ProtocolMax is the newest protocol version this release speaks.
const ProtocolMax uint32 = 1
