package capabilities

import "time"

// SetIdempotencyRenew sets how often a running keyed call renews its
// claim, and returns a function that restores it.
func SetIdempotencyRenew(d time.Duration) func() {
	old := idempotencyRenew
	idempotencyRenew = d
	return func() { idempotencyRenew = old }
}
