package wire

import "testing"

// TestEveryMessageTypeDecodes checks that every type byte msgNames names
// has a decoder in messageDecoders (Unmarshal, which must not panic,
// calls it for any such byte) and that the decoder makes a message of
// that type.
func TestEveryMessageTypeDecodes(t *testing.T) {
	if len(messageDecoders) != len(msgNames) {
		t.Fatalf("messageDecoders has %d entries, msgNames %d", len(messageDecoders), len(msgNames))
	}
	for b, name := range msgNames {
		decode := messageDecoders[b]
		if (name == "") != (decode == nil) {
			t.Errorf("type byte %d: name %q, decoder set %v", b, name, decode != nil)
			continue
		}
		if decode == nil {
			continue
		}
		d := decoder{msg: name} // no input: every read fails, nothing panics
		if m := decode(&d); MessageName(m) != name {
			t.Errorf("type byte %d (%s) decodes as a %s", b, name, MessageName(m))
		}
	}
}
