//go:build !catena_next_protocol

package release

// Version is this release's semantic version number. Raise it with every
// release, and add the release to CHANGELOG.md.
const Version = "0.2.0"

// ProtocolMax is the newest protocol version this release speaks:
// version 2 brings keys that expire (docs/adr/0028-expiry.md).
const ProtocolMax uint32 = 2
