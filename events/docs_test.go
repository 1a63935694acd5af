package events_test

import (
	"os"
	"strings"
	"testing"
)

// docs/events.md shows the verifier the webhook tests run, verbatim.
func TestDocsShowTheTestedVerifier(t *testing.T) {
	src, err := os.ReadFile("verify_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok1 := strings.Cut(string(src), "// --- verifier: begin ---\n")
	fn, _, ok2 := strings.Cut(after, "// --- verifier: end ---")
	fn = strings.TrimSpace(fn)
	if !ok1 || !ok2 || !strings.Contains(fn, "func VerifyWebhook(") {
		t.Fatal("verifier markers missing")
	}
	if !strings.Contains(string(doc), fn) {
		t.Fatal("docs/events.md does not carry the tested VerifyWebhook; copy it from events/verify_example_test.go")
	}
}
