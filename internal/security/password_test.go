package security

import (
	"bytes"
	"strings"
	"testing"
)

// A hash verifies its password and no other; two hashes of one password
// differ (fresh salts); the redacted form keeps only the parameters.
func TestHashAndVerifyPassword(t *testing.T) {
	h, err := HashPassword("s3cret", PasswordParamsDefault)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPasswordHash(h); err != nil {
		t.Fatalf("CheckPasswordHash(%q): %v", h, err)
	}
	if !VerifyPassword(h, "s3cret") {
		t.Fatal("the password does not verify against its hash")
	}
	for _, wrong := range []string{"", "s3cre", "s3cret ", "S3cret"} {
		if VerifyPassword(h, wrong) {
			t.Fatalf("%q verifies against the hash of s3cret", wrong)
		}
	}
	h2, err := HashPassword("s3cret", PasswordParamsDefault)
	if err != nil {
		t.Fatal(err)
	}
	if h == h2 {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
	if got, want := RedactPasswordHash(h), "argon2id m=19456,t=2,p=1"; got != want {
		t.Fatalf("RedactPasswordHash = %q, want %q", got, want)
	}
	if RedactPasswordHash("") != "" {
		t.Fatal("RedactPasswordHash of no hash is not empty")
	}
}

// The hash is the PHC string argon2id's reference implementation makes:
// a fixed salt gives a fixed string.
func TestHashPasswordFormat(t *testing.T) {
	salt := bytes.Repeat([]byte{1}, passwordSaltBytes)
	h, err := hashPassword("password", PasswordParamsDefault, bytes.NewReader(salt))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$AQEBAQEBAQEBAQEBAQEBAQ$") {
		t.Fatalf("hash %q: wrong PHC prefix", h)
	}
	again, _ := hashPassword("password", PasswordParamsDefault, bytes.NewReader(salt))
	if h != again {
		t.Fatalf("the same salt and password gave %q and %q", h, again)
	}
}

// Malformed or out-of-bounds hashes are refused with a reason and never
// verify.
func TestCheckPasswordHashRefuses(t *testing.T) {
	good, err := HashPassword("pw", PasswordParamsDefault)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(good, "$") // "", argon2id, v=19, params, salt, key
	salt, key := parts[4], parts[5]
	for _, tc := range []struct{ hash, want string }{
		{"", "does not start with"},
		{"plaintext", "does not start with"},
		{"$argon2i$v=19$m=19456,t=2,p=1$" + salt + "$" + key, "does not start with"},
		{"$argon2id$v=16$m=19456,t=2,p=1$" + salt + "$" + key, "does not start with"},
		{"$argon2id$v=19$m=19456,t=2,p=1$" + salt, "want $argon2id"},
		{"$argon2id$v=19$m=1024,t=2,p=1$" + salt + "$" + key, "memory 1024 KiB"},
		{"$argon2id$v=19$m=8192,t=1,p=1$" + salt + "$" + key, "too weak"},
		{"$argon2id$v=19$m=1048576,t=2,p=1$" + salt + "$" + key, "memory 1048576 KiB"},
		{"$argon2id$v=19$m=19456,t=0,p=1$" + salt + "$" + key, "passes 0"},
		{"$argon2id$v=19$m=19456,t=2,p=0$" + salt + "$" + key, "lanes 0"},
		{"$argon2id$v=19$m=19456,t=2,p=300$" + salt + "$" + key, "lanes 300"},
		{"$argon2id$v=19$m=19456,t=2,p=1,x=3$" + salt + "$" + key, "unknown parameter"},
		{"$argon2id$v=19$m=abc,t=2,p=1$" + salt + "$" + key, "not a number"},
		{"$argon2id$v=19$m=19456,t=2,p=1$AQ$" + key, "salt"},
		{"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$AQ", "hash must be"},
		{"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$" + key + "==", "hash must be"},
		{"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$" + strings.Repeat("A", 300), "longer than"},
	} {
		err := CheckPasswordHash(tc.hash)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckPasswordHash(%q) = %v, want an error containing %q", tc.hash, err, tc.want)
		}
		if VerifyPassword(tc.hash, "pw") {
			t.Errorf("%q verifies", tc.hash)
		}
	}
	if _, err := HashPassword("", PasswordParamsDefault); err == nil {
		t.Error("an empty password was hashed")
	}
	if _, err := HashPassword(strings.Repeat("x", PasswordLengthMax+1), PasswordParamsDefault); err == nil {
		t.Error("an overlong password was hashed")
	}
	if _, err := HashPassword("pw", PasswordParams{MemoryKiB: 1024, Passes: 1, Lanes: 1}); err == nil {
		t.Error("weak parameters were accepted")
	}
}
