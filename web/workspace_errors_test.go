package web

import (
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

// A workspace refusal reaches the page as a sentence: a capital letter and
// a full stop, while an opening identifier keeps its spelling.
func TestWorkspaceErrorsAreSentences(t *testing.T) {
	for in, want := range map[string]string{
		"a key name has 1 to 100 characters on one line, with no control characters": "A key name has 1 to 100 characters on one line, with no control characters.",
		"maxRole must be owner, admin or viewer":                                     "maxRole must be owner, admin or viewer.",
		"the last owner cannot leave; hand over ownership first":                     "The last owner cannot leave; hand over ownership first.",
		"API keys cannot be listed with this credential":                             "API keys cannot be listed with this credential.",
		"Already a sentence.": "Already a sentence.",
		"  élan is needed ":   "Élan is needed.",
		"":                    "",
	} {
		if got := sentence(in); got != want {
			t.Errorf("sentence(%q) = %q, want %q", in, got, want)
		}
	}
	err := capabilities.Errorf(capabilities.CodeInvalidInput, "a key name has 1 to 100 characters")
	msg, ok := inputError(err)
	if !ok || msg != "A key name has 1 to 100 characters." {
		t.Fatalf("inputError = %q, %v", msg, ok)
	}
	if capabilities.CodeOf(err) != capabilities.CodeInvalidInput || err.Message != "a key name has 1 to 100 characters" {
		t.Fatalf("the domain error changed: %v", err)
	}
}
