package envelope_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestSealOpen(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		r, err := envelope.Open(ctx, s.DB, s.Keeper)
		if err != nil {
			t.Fatal(err)
		}
		id, sealed, err := r.Seal("secret:user:a:name", []byte("v"))
		if err != nil || !strings.HasPrefix(sealed, "v1.") || strings.Count(sealed, ".") != 2 {
			t.Fatalf("sealed %q, %v", sealed, err)
		}
		if v, err := r.Open(ctx, id, sealed, "secret:user:a:name"); err != nil || string(v) != "v" {
			t.Fatalf("open = %q, %v", v, err)
		}
		// Change one character well inside the ciphertext (the last ones
		// may carry only padding bits), to a different one.
		i := len(sealed) - 4
		c := byte('A')
		if sealed[i] == c {
			c = 'B'
		}
		tampered := sealed[:i] + string(c) + sealed[i+1:]
		for name, tc := range map[string]struct {
			id     int64
			sealed string
			ad     string
		}{
			"other user":     {id, sealed, "secret:user:b:name"},
			"other name":     {id, sealed, "secret:user:a:other"},
			"tampered":       {id, tampered, "secret:user:a:name"},
			"unknown key":    {id + 99, sealed, "secret:user:a:name"},
			"bad version":    {id, "v2" + sealed[2:], "secret:user:a:name"},
			"not a envelope": {id, "plaintext", "secret:user:a:name"},
		} {
			if _, err := r.Open(ctx, tc.id, tc.sealed, tc.ad); !errors.Is(err, envelope.ErrOpen) {
				t.Errorf("%s: err %v, want ErrOpen", name, err)
			}
		}

		// After rotation, new seals use the new key and old ones still open,
		// also in a ring loaded afresh (another replica).
		newID, err := r.Rotate(ctx)
		if err != nil || newID == id || r.Current() != newID {
			t.Fatalf("rotate = %d, %v", newID, err)
		}
		other, err := envelope.Open(ctx, s.DB, s.Keeper)
		if err != nil || other.Current() != newID {
			t.Fatalf("fresh ring current %d, %v", other.Current(), err)
		}
		if _, err := other.Open(ctx, id, sealed, "secret:user:a:name"); err != nil {
			t.Fatalf("old value after rotation: %v", err)
		}
	})
}

func TestNamedKeyIsSharedByReplicas(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		keys := make([][]byte, 4)
		var wg sync.WaitGroup
		for i := range keys {
			r, err := envelope.Open(ctx, s.DB, s.Keeper)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				k, err := r.NamedKey(ctx, "audit")
				if err != nil {
					t.Error(err)
				}
				keys[i] = k
			})
		}
		wg.Wait()
		for i, k := range keys {
			if len(k) != 32 || !bytes.Equal(k, keys[0]) {
				t.Fatalf("replica %d got another audit key", i)
			}
		}
		r, _ := envelope.Open(ctx, s.DB, s.Keeper)
		other, err := r.NamedKey(ctx, "sessions")
		if err != nil || bytes.Equal(other, keys[0]) {
			t.Fatalf("distinct names share a key: %v", err)
		}
	})
}

// TestFollowSeesRotationOnOtherReplica: a key rotated on one replica is
// the one the other replica seals with, at once (not after a restart).
func TestFollowSeesRotationOnOtherReplica(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		a, err := envelope.Open(ctx, s.DB, s.Keeper)
		if err != nil {
			t.Fatal(err)
		}
		b, err := envelope.Open(ctx, s.DB, s.Keeper)
		if err != nil {
			t.Fatal(err)
		}
		group := cluster.NewLoopback()
		defer a.Follow(group.Join(), nil)()
		defer b.Follow(group.Join(), nil)()
		id, err := a.Rotate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for b.Current() != id {
			if time.Now().After(deadline) {
				t.Fatalf("replica B seals with key %d after A rotated to %d", b.Current(), id)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if kid, _, err := b.Seal("x", []byte("v")); err != nil || kid != id {
			t.Fatalf("B sealed with %d, %v", kid, err)
		}
	})
}
