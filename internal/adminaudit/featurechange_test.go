package adminaudit

import (
	"strings"
	"testing"
	"unicode"
)

// The audit Reason of adminFeatureSet is built from the call's arguments
// before the flag's name is validated (a refused call is recorded too): a
// name or role with line breaks or other control characters must not reach
// the audit log as they are, where they could forge entries in an export
// or a terminal.
func TestFeatureChangeReasonIsClean(t *testing.T) {
	for _, c := range []struct {
		name, role string
		enabled    bool
	}{
		{"beta\nadmin_grant user=1 result=success", "", true},
		{"beta", "admin\r\nforged", true},
		{"beta\x1b[2J", "", false},
		{"beta\u202e", "", true},
	} {
		r := featureChange(c.name, c.enabled, c.role)
		if strings.IndexFunc(r, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) >= 0 {
			t.Errorf("featureChange(%q, %v, %q) = %q: control characters reach the audit log", c.name, c.enabled, c.role, r)
		}
	}
	if r := featureChange("beta", true, "admin"); r != "beta on for role admin" {
		t.Fatalf("valid change: %q", r)
	}
	if r := featureChange("beta", false, ""); r != "beta off" {
		t.Fatalf("valid change: %q", r)
	}
}
