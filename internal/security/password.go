package security

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Passwords (of the users the Redis protocol's AUTH names) are kept as
// argon2id hashes in the PHC string format,
//
//	$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>
//
// (salt and hash in unpadded standard base64), so a hash carries the
// parameters it was made with and stronger ones can be used later
// without breaking older hashes. The catena command hashes a password on
// the operator's machine: the password never reaches the cluster, and
// the master's event loop never runs the KDF (docs/adr/0015-security.md).

// PasswordParams are argon2id's cost parameters.
type PasswordParams struct {
	// MemoryKiB is the memory one hash uses, in KiB.
	MemoryKiB uint32
	// Passes is argon2's time cost t.
	Passes uint32
	// Lanes is argon2's parallelism p.
	Lanes uint8
}

// PasswordParamsDefault are OWASP's recommended argon2id parameters
// (19 MiB, 2 passes, 1 lane): tens of milliseconds of one core per hash
// (44 ms on a busy 2-core development machine).
var PasswordParamsDefault = PasswordParams{MemoryKiB: 19 * 1024, Passes: 2, Lanes: 1}

// Bounds on the parameters a stored hash may carry. The floor keeps weak
// hashes out (OWASP's weakest acceptable trade-off is 7 MiB with 5
// passes); the ceiling bounds what verifying one costs a proxy.
const (
	passwordMemoryKiBMin  = 7 * 1024
	passwordCostMin       = 7 * 1024 * 5 // MemoryKiB × Passes
	passwordMemoryKiBMax  = 256 * 1024
	passwordPassesMax     = 64
	passwordLanesMax      = 16
	passwordSaltBytes     = 16
	passwordSaltBytesMin  = 8
	passwordKeyBytes      = 32
	passwordKeyBytesMin   = 16
	passwordKeyBytesMax   = 64
	passwordHashLengthMax = 256
	passwordPHCPrefix     = "$argon2id$v=19$"
)

// PasswordLengthMax bounds a password (AUTH's argument, or what catena
// user passwd reads).
const PasswordLengthMax = 1024

// HashPassword returns the argon2id hash of password with a fresh random
// salt, in PHC format.
func HashPassword(password string, p PasswordParams) (string, error) {
	return hashPassword(password, p, rand.Reader)
}

func hashPassword(password string, p PasswordParams, random io.Reader) (string, error) {
	if password == "" {
		return "", errors.New("empty password")
	}
	if len(password) > PasswordLengthMax {
		return "", fmt.Errorf("password longer than %d bytes", PasswordLengthMax)
	}
	if err := p.validate(); err != nil {
		return "", err
	}
	salt := make([]byte, passwordSaltBytes)
	if _, err := io.ReadFull(random, salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(password), salt, p.Passes, p.MemoryKiB, p.Lanes, passwordKeyBytes)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("%sm=%d,t=%d,p=%d$%s$%s", passwordPHCPrefix, p.MemoryKiB, p.Passes, p.Lanes,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

func (p PasswordParams) validate() error {
	switch {
	case p.MemoryKiB < passwordMemoryKiBMin || p.MemoryKiB > passwordMemoryKiBMax:
		return fmt.Errorf("argon2id memory %d KiB outside %d..%d", p.MemoryKiB, passwordMemoryKiBMin, passwordMemoryKiBMax)
	case p.Passes < 1 || p.Passes > passwordPassesMax:
		return fmt.Errorf("argon2id passes %d outside 1..%d", p.Passes, passwordPassesMax)
	case uint64(p.MemoryKiB)*uint64(p.Passes) < passwordCostMin:
		return fmt.Errorf("argon2id memory × passes %d×%d below %d: too weak", p.MemoryKiB, p.Passes, passwordCostMin)
	case p.Lanes < 1 || p.Lanes > passwordLanesMax:
		return fmt.Errorf("argon2id lanes %d outside 1..%d", p.Lanes, passwordLanesMax)
	}
	return nil
}

// passwordHash is a parsed PHC string.
type passwordHash struct {
	params    PasswordParams
	salt, key []byte
}

// parsePasswordHash parses and checks a PHC string made by HashPassword
// (or by another argon2id implementation with parameters in bounds).
func parsePasswordHash(s string) (passwordHash, error) {
	var h passwordHash
	if len(s) > passwordHashLengthMax {
		return h, fmt.Errorf("password hash longer than %d bytes", passwordHashLengthMax)
	}
	rest, ok := strings.CutPrefix(s, passwordPHCPrefix)
	if !ok {
		return h, fmt.Errorf("password hash does not start with %q (argon2id, version 19)", passwordPHCPrefix)
	}
	parts := strings.Split(rest, "$")
	if len(parts) != 3 {
		return h, errors.New("password hash: want $argon2id$v=19$m=..,t=..,p=..$salt$hash")
	}
	var m, t, p uint64
	for _, kv := range strings.Split(parts[0], ",") {
		name, value, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(value, 10, 32)
		if err != nil {
			return h, fmt.Errorf("password hash: parameter %q: not a number", kv)
		}
		switch name {
		case "m":
			m = n
		case "t":
			t = n
		case "p":
			p = n
		default:
			return h, fmt.Errorf("password hash: unknown parameter %q", name)
		}
	}
	if p > passwordLanesMax {
		return h, fmt.Errorf("argon2id lanes %d outside 1..%d", p, passwordLanesMax)
	}
	h.params = PasswordParams{MemoryKiB: uint32(m), Passes: uint32(t), Lanes: uint8(p)}
	if err := h.params.validate(); err != nil {
		return h, fmt.Errorf("password hash: %w", err)
	}
	var err error
	if h.salt, err = base64.RawStdEncoding.Strict().DecodeString(parts[1]); err != nil || len(h.salt) < passwordSaltBytesMin {
		return h, fmt.Errorf("password hash: salt must be at least %d bytes of unpadded base64", passwordSaltBytesMin)
	}
	if h.key, err = base64.RawStdEncoding.Strict().DecodeString(parts[2]); err != nil || len(h.key) < passwordKeyBytesMin || len(h.key) > passwordKeyBytesMax {
		return h, fmt.Errorf("password hash: hash must be %d to %d bytes of unpadded base64", passwordKeyBytesMin, passwordKeyBytesMax)
	}
	return h, nil
}

// CheckPasswordHash reports why s is not a password hash Catena keeps: an
// argon2id PHC string, version 19, with parameters within bounds (not
// weaker than OWASP's recommendations, not costlier than a proxy should
// pay per AUTH).
func CheckPasswordHash(s string) error {
	_, err := parsePasswordHash(s)
	return err
}

// VerifyPassword reports whether password matches the hash. It computes
// the KDF: milliseconds of CPU and MemoryKiB of memory; callers bound how
// many run at once.
func VerifyPassword(hash, password string) bool {
	h, err := parsePasswordHash(hash)
	if err != nil || len(password) > PasswordLengthMax {
		return false
	}
	key := argon2.IDKey([]byte(password), h.salt, h.params.Passes, h.params.MemoryKiB, h.params.Lanes, uint32(len(h.key)))
	return subtle.ConstantTimeCompare(key, h.key) == 1
}

// RedactPasswordHash returns the hash without its salt and key: its
// algorithm and parameters, which say how it was made and nothing that
// helps guess the password ("" for "").
func RedactPasswordHash(hash string) string {
	if hash == "" {
		return ""
	}
	h, err := parsePasswordHash(hash)
	if err != nil {
		return "(malformed)"
	}
	return fmt.Sprintf("argon2id m=%d,t=%d,p=%d", h.params.MemoryKiB, h.params.Passes, h.params.Lanes)
}
