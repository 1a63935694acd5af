package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

type leaseMark struct{}

// fakeLeases is an Options.WriteLease that records what it was asked.
type fakeLeases struct {
	taken, ended []string
	refuse       error // returned instead of a lease
	lost         error // what end reports
}

func (f *fakeLeases) lease(ctx context.Context, c capabilities.Caller, name string) (context.Context, func() error, error) {
	if f.refuse != nil {
		return nil, nil, f.refuse
	}
	f.taken = append(f.taken, c.UserID+":"+name)
	return context.WithValue(ctx, leaseMark{}, name), func() error {
		f.ended = append(f.ended, name)
		return f.lost
	}, nil
}

// Only a call that may write takes a write lease; its handler runs with
// the lease's context, and the lease ends when the handler returns.
func TestInvokeTakesWriteLeases(t *testing.T) {
	leases := &fakeLeases{}
	audit := &capabilitiestest.Auditor{}
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: audit, WriteLease: leases.lease, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var sawLease []any
	handler := func(name string, ann capabilities.Annotations, req capabilities.Requirement, fail error) capabilities.Capability {
		return capabilities.Define(capabilities.Spec[echoIn, echoOut]{
			Name: name, Domain: "test", Description: "Echoes its input.", Annotations: &ann, Requires: req,
			Handler: func(ctx context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
				sawLease = append(sawLease, ctx.Value(leaseMark{}))
				if ctx.Value(leaseMark{}) != nil && len(leases.ended) != len(leases.taken)-1 {
					t.Error("the lease ended before the handler returned")
				}
				return echoOut{Echo: in.Text}, fail
			},
		})
	}
	broke := errors.New("the write failed: context canceled")
	if err := reg.Register(
		handler("readThing", read, capabilities.Requirement{}, nil),
		handler("sessionRead", read, capabilities.Requirement{SessionOnly: true}, nil),
		handler("writeThing", write, capabilities.Requirement{}, nil),
		handler("writeBroken", write, capabilities.Requirement{}, broke),
		handler("finishDeletion", write, capabilities.Requirement{DuringDeletion: true}, nil),
	); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	user.Session = true
	ctx := context.Background()
	args := json.RawMessage(`{"text":"x"}`)
	for _, name := range []string{"readThing", "sessionRead", "finishDeletion"} {
		if _, err := reg.Invoke(ctx, user, name, args); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if len(leases.taken) != 0 {
		t.Fatalf("reads and the deletion itself took leases: %v", leases.taken)
	}
	if _, err := reg.Invoke(ctx, user, "writeThing", args); err != nil {
		t.Fatal(err)
	}
	if len(leases.taken) != 1 || leases.taken[0] != "u1:writeThing" || len(leases.ended) != 1 || sawLease[len(sawLease)-1] != "writeThing" {
		t.Fatalf("write call: taken %v, ended %v, handler saw %v", leases.taken, leases.ended, sawLease)
	}

	// A lease that ended early explains a failed call; a call that
	// succeeded keeps its answer.
	deleting := &capabilities.Error{Code: capabilities.CodeAccountDeleting, Message: "this account is being deleted"}
	leases.lost = deleting
	_, err := reg.Invoke(ctx, user, "writeBroken", args)
	if e, ok := err.(*capabilities.Error); !ok || e.Code != capabilities.CodeAccountDeleting {
		t.Fatalf("failed call under an ended lease answered %v", err)
	}
	if res, err := reg.Invoke(ctx, user, "writeThing", args); err != nil || res.IsError {
		t.Fatalf("successful call under an ended lease answered %v %+v", err, res)
	}
	leases.lost = errors.New("lease storage detail")
	_, err = reg.Invoke(ctx, user, "writeBroken", args)
	if e, ok := err.(*capabilities.Error); !ok || e.Code != capabilities.CodeInternal || e.Message != "internal error" {
		t.Fatalf("an ended lease's plain error answered %v", err)
	}
	leases.lost = nil

	// A refused lease refuses the call before its handler runs.
	runs := len(sawLease)
	leases.refuse = deleting
	_, err = reg.Invoke(ctx, user, "writeThing", args)
	if e, ok := err.(*capabilities.Error); !ok || e.Code != capabilities.CodeAccountDeleting {
		t.Fatalf("refused lease answered %v", err)
	}
	if d := audit.Denials(); len(d) == 0 || d[len(d)-1].Reason != capabilities.ReasonDeleting || d[len(d)-1].Name != "writeThing" {
		t.Fatalf("refused lease not audited as a deletion denial: %+v", d)
	}
	leases.refuse = errors.New("database unreachable at 10.0.0.5")
	_, err = reg.Invoke(ctx, user, "writeThing", args)
	if e, ok := err.(*capabilities.Error); !ok || e.Code != capabilities.CodeInternal || e.Message != "internal error" {
		t.Fatalf("failing lease answered %v", err)
	}
	if len(sawLease) != runs {
		t.Fatal("a call whose lease was refused ran")
	}
}
