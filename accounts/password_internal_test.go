package accounts

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestHashRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHasher(Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}.withDefaults(), 2)
	enc, err := h.hash(ctx, "pässwörd with ünïcode")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(enc, "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("encoded %q", enc)
	}
	again, _ := h.hash(ctx, "pässwörd with ünïcode")
	if again == enc {
		t.Fatal("two hashes of one password are equal: salt is not random")
	}
	for _, tc := range []struct {
		password  string
		ok, stale bool
		h         *hasher
	}{
		{"pässwörd with ünïcode", true, false, h},
		{"passwörd with ünïcode", false, false, h},
		{"", false, false, h},
		{"pässwörd with ünïcode", true, true, newHasher(Argon2Params{MemoryKiB: 128, Iterations: 1, Parallelism: 1}.withDefaults(), 1)},
	} {
		ok, stale, err := tc.h.verify(ctx, enc, tc.password)
		if err != nil || ok != tc.ok || stale != tc.stale {
			t.Errorf("verify(%q) = %v, %v, %v; want %v, %v", tc.password, ok, stale, err, tc.ok, tc.stale)
		}
	}
}

func TestDecodeHashRefusesMalformed(t *testing.T) {
	t.Parallel()
	const salt, key = "c2FsdHNhbHRzYWx0c2FsdA", "a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U"
	for _, enc := range []string{
		"",
		"plain text",
		"$argon2i$v=19$m=64,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=16$m=64,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=0,t=1,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=99999999,t=1,p=1$" + salt + "$" + key, // would allocate ~100 GB
		"$argon2id$v=19$m=64,t=1000,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=64,t=1,p=0$" + salt + "$" + key,
		"$argon2id$v=19$m=64,t=1,p=1$!!!$" + key,
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$",
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + key + "$extra",
	} {
		if _, _, _, err := decodeHash(enc); !errors.Is(err, errMalformedHash) {
			t.Errorf("decodeHash(%q) = %v, want errMalformedHash", enc, err)
		}
	}
	if _, _, _, err := decodeHash("$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + key); err != nil {
		t.Errorf("well-formed hash refused: %v", err)
	}
}

func TestPasswordPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		password string
		ok       bool
	}{
		{"twelve chars", true},
		{"eleven char", false},
		{"ünïcödé chàr", true}, // 12 characters, more bytes
		{strings.Repeat("a", MaxPasswordBytes), true},
		{strings.Repeat("a", MaxPasswordBytes+1), false},
		{"quinn@example.com", false},
		{" QUINN@EXAMPLE.COM ", false},
		{"quinn-the-eskimo", false},
		{"quinn-the-eskimo!", true},
		{"\xff\xfe invalid utf8 bytes", false},
	} {
		err := checkPasswordPolicy(tc.password, "quinn@example.com", "quinn-the-eskimo", 12)
		if (err == nil) != tc.ok {
			t.Errorf("policy(%q) = %v, want ok=%v", tc.password, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrWeakPassword) {
			t.Errorf("policy error %v does not match ErrWeakPassword", err)
		}
	}
}

func TestDefaultArgon2MeetsOWASPMinimum(t *testing.T) {
	t.Parallel()
	p := Argon2Params{}.withDefaults()
	// OWASP: argon2id with at least 19 MiB memory, 2 iterations, 1 lane.
	if p.MemoryKiB < 19*1024 || p.Iterations < 2 || p.Parallelism < 1 || p.SaltLen < 16 || p.KeyLen < 32 {
		t.Fatalf("default parameters %+v are below OWASP's minimum", p)
	}
}
