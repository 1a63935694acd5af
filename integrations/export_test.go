package integrations

import "time"

// SetRevokeAllBudget sets RevokeAll's time budget for a test.
func SetRevokeAllBudget(t interface{ Cleanup(func()) }, d time.Duration) {
	old := revokeAllBudget
	revokeAllBudget = d
	t.Cleanup(func() { revokeAllBudget = old })
}

// SetRefreshDueBudget sets RefreshDue's time budget for a test.
func SetRefreshDueBudget(t interface{ Cleanup(func()) }, d time.Duration) {
	old := refreshDueBudget
	refreshDueBudget = d
	t.Cleanup(func() { refreshDueBudget = old })
}
