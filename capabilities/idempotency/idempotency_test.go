package idempotency_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/idempotency"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func addUser(t *testing.T, s *storage.Store, name string) int64 {
	t.Helper()
	now := time.Now().UTC()
	var id int64
	err := s.DB.NewRaw(`INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?) RETURNING id`,
		strings.Repeat(name[:1], 64), name+"@example.com", name, now, now).Scan(context.Background(), &id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Concurrent claims of one key: exactly one wins; the others see its row.
// A completed row is returned with its result; an expired row is replaced;
// keys are per user.
func TestClaimIsAtomic(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		ring, err := envelope.Open(ctx, s.DB, s.Keeper)
		if err != nil {
			t.Fatal(err)
		}
		st := idempotency.New(s, ring)
		alice := addUser(t, s, "alice")
		k := capabilities.IdempotencyKey{UserID: strings.Repeat("a", 64), Capability: "pay", KeyHash: "h1", ArgsHash: "a1"}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		var winner int64
		for range 8 {
			wg.Go(func() {
				rec, claimed, err := st.Claim(ctx, k)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if claimed {
					won++
					winner = rec.ID
				} else if rec.Done {
					t.Error("a running claim was reported done")
				}
			})
		}
		wg.Wait()
		if won != 1 {
			t.Fatalf("%d claims won, want 1", won)
		}
		if err := st.Complete(ctx, winner, []byte(`{"content":["a new credential"]}`)); err != nil {
			t.Fatal(err)
		}
		// Sealed at rest.
		var stored string
		if err := s.DB.NewSelect().Table("idempotency_keys").Column("result").Where("id = ?", winner).Scan(ctx, &stored); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stored, "credential") || !strings.HasPrefix(stored, "v1.") {
			t.Fatalf("the result is stored in clear: %q", stored)
		}
		rec, claimed, err := st.Claim(ctx, k)
		if err != nil || claimed || !rec.Done || string(rec.Result) != `{"content":["a new credential"]}` || rec.ArgsHash != "a1" {
			t.Fatalf("after completion: %+v claimed=%v err=%v", rec, claimed, err)
		}
		// Release never removes a completed row.
		if err := st.Release(ctx, winner); err != nil {
			t.Fatal(err)
		}
		if _, claimed, _ := st.Claim(ctx, k); claimed {
			t.Fatal("a completed row was released")
		}
		// Another user, same key: a claim of its own.
		bob := addUser(t, s, "bob")
		kb := k
		kb.UserID, kb.OwnerID = "", bob
		bobRec, claimed, err := st.Claim(ctx, kb)
		if err != nil || !claimed {
			t.Fatalf("bob's claim: %v %v", claimed, err)
		}
		// Alice's sealed result copied into Bob's row does not open.
		if _, err := s.DB.NewRaw(`UPDATE idempotency_keys SET state = 'done', result = (SELECT result FROM idempotency_keys WHERE id = ?), key_id = (SELECT key_id FROM idempotency_keys WHERE id = ?) WHERE id = ?`,
			winner, winner, bobRec.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.Claim(ctx, kb); err == nil {
			t.Fatal("a result copied from another user's row opened")
		}
		// Expired: the key is free again.
		if _, err := s.DB.NewUpdate().Table("idempotency_keys").Set("created_at = ?", time.Now().UTC().Add(-25*time.Hour)).Where("user_id = ?", alice).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if rec, claimed, err := st.Claim(ctx, k); err != nil || !claimed || rec.ID == winner {
			t.Fatalf("expired key: %+v %v %v", rec, claimed, err)
		}
	})
}

// A claim whose row is deleted while its handler runs (its owner's account
// deleted, or expired) must not complete or release someone else's later
// claim: row ids are never handed out again, so the late Complete finds
// nothing and another user's retry never receives the first user's result.
func TestLateCompleteNeverReachesAnotherClaim(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		ring, err := envelope.Open(ctx, s.DB, s.Keeper)
		if err != nil {
			t.Fatal(err)
		}
		st := idempotency.New(s, ring)
		alice, bob := addUser(t, s, "alice"), addUser(t, s, "bob")
		ka := capabilities.IdempotencyKey{OwnerID: alice, Capability: "mint", KeyHash: "h", ArgsHash: "a"}
		kb := capabilities.IdempotencyKey{OwnerID: bob, Capability: "mint", KeyHash: "h", ArgsHash: "a"}
		for i := range 20 {
			first, claimed, err := st.Claim(ctx, ka)
			if err != nil || !claimed {
				t.Fatalf("alice's claim: %v %v", claimed, err)
			}
			// Alice's row goes while her handler runs.
			if _, err := s.DB.NewDelete().Table("idempotency_keys").Where("id = ?", first.ID).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			second, claimed, err := st.Claim(ctx, kb)
			if err != nil || !claimed {
				t.Fatalf("bob's claim: %v %v", claimed, err)
			}
			if second.ID == first.ID {
				t.Fatalf("round %d: bob's claim got the id of alice's deleted row (%d)", i, first.ID)
			}
			// Alice's handler ends: her result must not land in bob's row.
			_ = st.Complete(ctx, first.ID, []byte(`{"content":"alice's new credential"}`)) // its row is gone: an error is fine
			if err := st.Release(ctx, first.ID); err != nil {
				t.Fatal(err)
			}
			rec, claimed, err := st.Claim(ctx, kb)
			if err != nil || claimed || rec.Done || rec.ID != second.ID {
				t.Fatalf("bob's row after alice's late completion: %+v claimed=%v err=%v", rec, claimed, err)
			}
			if err := st.Release(ctx, second.ID); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A running claim that is neither completed nor renewed for
// IdempotencyStale belongs to a replica that died: the next claim of its
// key takes it over instead of answering "still running" for a day. A
// renewed claim is left to its holder.
func TestStaleClaimIsTakenOver(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		ring, err := envelope.Open(ctx, s.DB, s.Keeper)
		if err != nil {
			t.Fatal(err)
		}
		st := idempotency.New(s, ring)
		alice := addUser(t, s, "alice")
		age := func(id int64, d time.Duration) {
			t.Helper()
			if _, err := s.DB.NewUpdate().Table("idempotency_keys").Set("created_at = ?", time.Now().UTC().Add(-d)).Where("id = ?", id).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
		k := capabilities.IdempotencyKey{OwnerID: alice, Capability: "pay", KeyHash: "h", ArgsHash: "a"}
		dead, claimed, err := st.Claim(ctx, k)
		if err != nil || !claimed {
			t.Fatal(claimed, err)
		}
		// Young and running: still the holder's.
		age(dead.ID, capabilities.IdempotencyStale/2)
		if rec, claimed, err := st.Claim(ctx, k); err != nil || claimed || rec.Done {
			t.Fatalf("young running claim: %+v %v %v", rec, claimed, err)
		}
		// Renewed, though claimed long ago: still the holder's.
		age(dead.ID, time.Hour)
		if err := st.Renew(ctx, dead.ID); err != nil {
			t.Fatal(err)
		}
		if rec, claimed, err := st.Claim(ctx, k); err != nil || claimed || rec.ID != dead.ID {
			t.Fatalf("renewed claim: %+v %v %v", rec, claimed, err)
		}
		// Not renewed for longer than IdempotencyStale: taken over.
		if _, err := s.DB.NewUpdate().Table("idempotency_keys").Set("completed_at = ?", time.Now().UTC().Add(-capabilities.IdempotencyStale-time.Second)).Where("id = ?", dead.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		rec, claimed, err := st.Claim(ctx, k)
		if err != nil || !claimed || rec.ID == dead.ID {
			t.Fatalf("stale claim: %+v %v %v", rec, claimed, err)
		}
		// The dead holder's late completion changes nothing.
		_ = st.Complete(ctx, dead.ID, []byte(`{}`))
		if again, claimed, err := st.Claim(ctx, k); err != nil || claimed || again.Done {
			t.Fatalf("after the dead holder's completion: %+v %v %v", again, claimed, err)
		}
		// A completed row is never taken over, however old its completion.
		if err := st.Complete(ctx, rec.ID, []byte(`{"ok":true}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB.NewUpdate().Table("idempotency_keys").Set("completed_at = ?", time.Now().UTC().Add(-time.Hour)).Where("id = ?", rec.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if done, claimed, err := st.Claim(ctx, k); err != nil || claimed || !done.Done {
			t.Fatalf("completed row: %+v %v %v", done, claimed, err)
		}
	})
}
