package capabilities_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

// capabilities knows no storage: the owner key travels on Caller, and
// paging helpers live with storage.
func TestNoStorageDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "/storage") || strings.HasPrefix(dep, "github.com/uptrace/bun") || strings.HasPrefix(dep, "gocloud.dev") {
			t.Errorf("capabilities depends on %s", dep)
		}
	}
}

// inputMistake is another package's error that is the caller's mistake.
type inputMistake struct{}

func (inputMistake) Error() string        { return "store: bad cursor 0xdeadbeef" }
func (inputMistake) InvalidInput() string { return "start again without a cursor" }

// A handler's InputError (as storage returns for a bad cursor or limit)
// reaches the caller as invalid input with its sentence, never as an
// internal error with the inner detail.
func TestInputErrorsAreInvalidInput(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{})
	err := reg.Register(capabilities.Define(capabilities.Spec[struct{}, struct{}]{
		Name: "listThings", Domain: "test", Description: "Lists things.",
		Annotations: &capabilities.Annotations{ReadOnly: true},
		Handler: func(context.Context, *capabilities.Call, struct{}) (struct{}, error) {
			return struct{}{}, fmtWrap(inputMistake{})
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	caller := capabilities.Caller{UserID: "u", State: capabilities.AccountActive, AllScopes: true}
	_, err = reg.Invoke(context.Background(), caller, "listThings", json.RawMessage(`{}`))
	e, ok := err.(*capabilities.Error)
	if !ok || e.Code != capabilities.CodeInvalidInput || e.Message != "start again without a cursor" {
		t.Fatalf("Invoke = %#v", err)
	}
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return "list: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }

func fmtWrap(err error) error { return wrapped{err} }
