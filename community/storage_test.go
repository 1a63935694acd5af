package community_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/quota"
)

// A plan's storageBytes bound what an account stores (its storage
// buckets' keys and values): a write past them is refused with a
// sentence naming the limit and the use, usageGet reports the use against
// the limit, and two writers racing for the last bytes cannot both pass.
func TestCommunityPlanStorageBytes(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob, ada := s.CreateUser(t, "alice"), s.CreateUser(t, "bob"), s.CreateUser(t, "ada", capabilities.RoleAdmin)
		ac, bc, dc := alice.Caller(t), bob.Caller(t), ada.Caller(t)
		must[quota.Plan](t, s, dc, "adminPlanSave", map[string]any{"name": "tiny", "storageBytes": 1000})
		must[quota.UserPlanSetOutput](t, s, dc, "adminUserPlanSet", map[string]any{"username": "alice", "plan": "tiny"})
		must[quota.UserPlanSetOutput](t, s, dc, "adminUserPlanSet", map[string]any{"username": "bob", "plan": "tiny"})
		set := func(c capabilities.Caller, key string, size int) error {
			_, err := call[map[string]any](t, s, c, "storageSet", map[string]any{"storageId": "notes", "key": key, "value": strings.Repeat("v", size-2)})
			return err
		}
		// key "k1" (2 bytes) and a 400-byte JSON string: 402 bytes.
		if err := set(ac, "k1", 400); err != nil {
			t.Fatal(err)
		}
		u := must[quota.PlanUsage](t, s, ac, "usageGet", struct{}{})
		if u.Plan != "tiny" || u.Storage == nil || u.Storage.Used != 402 || u.Storage.Limit != 1000 || u.StorageBytes == nil || *u.StorageBytes != 1000 {
			t.Fatalf("usage %s", mustJSON(u))
		}
		err := set(ac, "k2", 700)
		if code(err) != capabilities.CodeQuotaExceeded {
			t.Fatalf("a write past the plan's storage bytes: %v", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "1000 bytes") || !strings.Contains(msg, "402 are in use") {
			t.Fatalf("the refusal does not name the limit and the use: %q", msg)
		}
		if u := must[quota.PlanUsage](t, s, ac, "usageGet", struct{}{}); u.Storage.Used != 402 {
			t.Fatalf("a refused write was charged: %+v", u.Storage)
		}
		// A write that fits still passes; a replacement is charged its
		// difference only.
		if err := set(ac, "k1", 990); err != nil {
			t.Fatalf("replacing within the limit: %v", err)
		}
		// Bob's use is his own.
		if u := must[quota.PlanUsage](t, s, bc, "usageGet", struct{}{}); u.Storage.Used != 0 || u.Storage.Limit != 1000 {
			t.Fatalf("bob's usage %+v", u.Storage)
		}

		// The race: two writes of 600 bytes, room for one.
		for i := range 6 {
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for w := range 2 {
				wg.Go(func() { errs[w] = set(bc, fmt.Sprintf("r%d", w), 598) })
			}
			wg.Wait()
			passed := 0
			for _, err := range errs {
				switch {
				case err == nil:
					passed++
				case code(err) == capabilities.CodeQuotaExceeded:
				default:
					t.Fatalf("trial %d: %v", i, err)
				}
			}
			u := must[quota.PlanUsage](t, s, bc, "usageGet", struct{}{})
			if passed != 1 || u.Storage.Used != 600 {
				t.Fatalf("trial %d: %d writes passed, %d bytes in use", i, passed, u.Storage.Used)
			}
			for w := range 2 {
				if _, err := call[map[string]any](t, s, bc, "storageDelete", map[string]any{"storageId": "notes", "key": fmt.Sprintf("r%d", w)}); err != nil {
					t.Fatal(err)
				}
			}
		}

		// Back on the default plan (no storage bytes): the server's budget.
		must[quota.UserPlanSetOutput](t, s, dc, "adminUserPlanSet", map[string]any{"username": "alice", "plan": "default"})
		if err := set(ac, "k2", 700); err != nil {
			t.Fatalf("on the default plan: %v", err)
		}
		if u := must[quota.PlanUsage](t, s, ac, "usageGet", struct{}{}); u.Storage.Limit != 100<<20 || u.StorageBytes != nil {
			t.Fatalf("default plan usage %s", mustJSON(u))
		}
	})
}
