package accounts

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Argon2Params is the cost of argon2id password hashes.
//
// The defaults follow the first configuration OWASP's Password Storage Cheat
// Sheet recommends for argon2id: 19 MiB of memory, 2 passes, 1 lane. OWASP
// lists equivalent trade-offs (for example 46 MiB × 1 pass, or 12 MiB × 3
// passes); we take the 19 MiB one because memory is what a server pays per
// concurrent login (MaxConcurrentHashes × MemoryKiB), and 2 passes at that
// size cost roughly 20–40 ms of one core, which keeps login fast while
// making each guess expensive on GPUs. Raise MemoryKiB or Iterations when
// hardware allows: hashes made with other parameters are re-hashed on the
// next successful login.
type Argon2Params struct {
	MemoryKiB   uint32 // default 19456 (19 MiB)
	Iterations  uint32 // default 2
	Parallelism uint8  // default 1
	SaltLen     uint32 // default 16 bytes
	KeyLen      uint32 // default 32 bytes
}

// DefaultArgon2 is the default hashing cost (see Argon2Params).
var DefaultArgon2 = Argon2Params{MemoryKiB: 19 * 1024, Iterations: 2, Parallelism: 1, SaltLen: 16, KeyLen: 32}

func (p Argon2Params) withDefaults() Argon2Params {
	if p.MemoryKiB == 0 {
		p.MemoryKiB = DefaultArgon2.MemoryKiB
	}
	if p.Iterations == 0 {
		p.Iterations = DefaultArgon2.Iterations
	}
	if p.Parallelism == 0 {
		p.Parallelism = DefaultArgon2.Parallelism
	}
	if p.SaltLen == 0 {
		p.SaltLen = DefaultArgon2.SaltLen
	}
	if p.KeyLen == 0 {
		p.KeyLen = DefaultArgon2.KeyLen
	}
	return p
}

// Hashes that ask for more than this are refused when verifying: a stored
// hash must not be able to make the server allocate without bound.
const (
	maxHashMemoryKiB  = 1 << 20 // 1 GiB
	maxHashIterations = 64
)

// hasher hashes and verifies passwords, at most limit at a time.
type hasher struct {
	params Argon2Params
	limit  chan struct{}
}

func newHasher(p Argon2Params, concurrency int) *hasher {
	return &hasher{params: p, limit: make(chan struct{}, concurrency)}
}

// acquire waits for a hashing slot.
func (h *hasher) acquire(ctx context.Context) error {
	select {
	case h.limit <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *hasher) release() { <-h.limit }

// hash returns password's argon2id hash in PHC string form:
// $argon2id$v=19$m=…,t=…,p=…$salt$key (unpadded standard base64).
func (h *hasher) hash(ctx context.Context, password string) (string, error) {
	if err := h.acquire(ctx); err != nil {
		return "", err
	}
	defer h.release()
	p := h.params
	salt := make([]byte, p.SaltLen)
	_, _ = rand.Read(salt)
	key := argon2.IDKey([]byte(password), salt, p.Iterations, p.MemoryKiB, p.Parallelism, p.KeyLen)
	return encodeHash(p, salt, key), nil
}

func encodeHash(p Argon2Params, salt, key []byte) string {
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.MemoryKiB, p.Iterations, p.Parallelism, b64.EncodeToString(salt), b64.EncodeToString(key))
}

var errMalformedHash = errors.New("accounts: malformed password hash")

// decodeHash parses a PHC argon2id string.
func decodeHash(s string) (p Argon2Params, salt, key []byte, err error) {
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, errMalformedHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return p, nil, nil, errMalformedHash
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.MemoryKiB, &p.Iterations, &p.Parallelism); err != nil {
		return p, nil, nil, errMalformedHash
	}
	if p.MemoryKiB == 0 || p.MemoryKiB > maxHashMemoryKiB || p.Iterations == 0 || p.Iterations > maxHashIterations || p.Parallelism == 0 {
		return p, nil, nil, errMalformedHash
	}
	b64 := base64.RawStdEncoding
	if salt, err = b64.DecodeString(parts[4]); err != nil || len(salt) < 8 {
		return p, nil, nil, errMalformedHash
	}
	if key, err = b64.DecodeString(parts[5]); err != nil || len(key) < 16 || len(key) > 64 {
		return p, nil, nil, errMalformedHash
	}
	p.SaltLen, p.KeyLen = uint32(len(salt)), uint32(len(key))
	return p, salt, key, nil
}

// verify reports whether password matches encoded, and whether encoded
// should be re-hashed because it was made with other parameters.
func (h *hasher) verify(ctx context.Context, encoded, password string) (ok, stale bool, err error) {
	p, salt, key, err := decodeHash(encoded)
	if err != nil {
		return false, false, err
	}
	if err := h.acquire(ctx); err != nil {
		return false, false, err
	}
	defer h.release()
	got := argon2.IDKey([]byte(password), salt, p.Iterations, p.MemoryKiB, p.Parallelism, p.KeyLen)
	ok = subtle.ConstantTimeCompare(got, key) == 1
	return ok, p != h.params, nil
}

// checkPasswordPolicy returns a *PasswordPolicyError when password may not
// be set as a new password for an account with this email and username.
func checkPasswordPolicy(password, email, username string, minLen int) error {
	if len(password) > MaxPasswordBytes {
		return &PasswordPolicyError{Reason: fmt.Sprintf("Passwords can be at most %d bytes long.", MaxPasswordBytes)}
	}
	if !utf8.ValidString(password) {
		return &PasswordPolicyError{Reason: "Passwords must be valid UTF-8 text."}
	}
	if utf8.RuneCountInString(password) < minLen {
		return &PasswordPolicyError{Reason: fmt.Sprintf("Passwords must be at least %d characters long.", minLen)}
	}
	folded := strings.ToLower(strings.TrimSpace(password))
	if (email != "" && folded == strings.ToLower(email)) || (username != "" && folded == strings.ToLower(username)) {
		return &PasswordPolicyError{Reason: "The password may not be your email address or username."}
	}
	return nil
}
