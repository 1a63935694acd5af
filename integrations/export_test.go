package integrations

import (
	"net/http"
	"time"
)

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

// AppClient is the client exchanges with people's own apps go through.
func (s *Service) AppClient() interface {
	Get(string) (*http.Response, error)
} {
	return s.appClient
}
