package integrations

import "time"

// SetRevokeAllBudget sets RevokeAll's time budget for a test.
func SetRevokeAllBudget(t interface{ Cleanup(func()) }, d time.Duration) {
	old := revokeAllBudget
	revokeAllBudget = d
	t.Cleanup(func() { revokeAllBudget = old })
}
