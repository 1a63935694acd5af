package enclave_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/schedules"
)

// exampleServer starts a server in a temporary directory; stop removes it.
func exampleServer(cfg enclave.Config) (srv *enclave.Server, stop func()) {
	dir, err := os.MkdirTemp("", "enclave-example")
	if err != nil {
		panic(err)
	}
	cfg.DataDir, cfg.Logger, cfg.Accounts = dir, quiet(), fastArgon
	srv, err = enclave.New(context.Background(), cfg)
	if err != nil {
		panic(err)
	}
	return srv, func() { srv.Close(); os.RemoveAll(dir) }
}

// exampleUser creates an account and returns its caller as a request would
// load it.
func exampleUser(srv *enclave.Server, name string, roles ...string) capabilities.Caller {
	ctx := context.Background()
	u, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: name + "@example.com", Username: name, Password: "a long enough password", Verified: true})
	if err != nil {
		panic(err)
	}
	for _, r := range roles {
		if _, err := assignOrGrant(srv.Accounts(), ctx, u.ID, r); err != nil {
			panic(err)
		}
	}
	c, err := srv.Accounts().LoadCaller(ctx, u.StableID)
	if err != nil {
		panic(err)
	}
	c.Interactive, c.AllScopes = true, true
	return c
}

// An embedder's own permission entity: its permissions reach SQL and the
// built-in roles at start, and capabilities can require them.
func ExampleConfig_vocabulary() {
	vocab, err := capabilities.NewVocabulary("note")
	if err != nil {
		panic(err)
	}
	srv, stop := exampleServer(enclave.Config{Vocabulary: vocab})
	defer stop()

	readNote := capabilities.NewPermission(capabilities.ActionRead, "note", capabilities.Own)
	err = srv.Registry().Register(capabilities.Define(capabilities.Spec[struct{}, struct{}]{
		Name: "noteCount", Domain: "notes", Description: "Counts the caller's notes.",
		Annotations: &capabilities.Annotations{ReadOnly: true},
		Requires:    capabilities.Requirement{Permissions: []capabilities.Permission{readNote}},
		Handler:     func(context.Context, *capabilities.Call, struct{}) (struct{}, error) { return struct{}{}, nil },
	}))
	fmt.Println("registered:", err == nil)
	ann := exampleUser(srv, "ann")
	fmt.Println("role user holds read:note:own:", ann.HasPermission(readNote))
	// Output:
	// registered: true
	// role user holds read:note:own: true
}

// A job enqueued in the caller's transaction runs after the commit; it
// invokes capabilities as its user, non-interactively.
func ExampleServer_Jobs() {
	srv, stop := exampleServer(enclave.Config{})
	defer stop()
	ctx := context.Background()
	done := make(chan string, 1)
	err := srv.Jobs().Register("welcome", func(ctx context.Context, job jobs.Job) error {
		var p struct{ Text string }
		if err := job.Decode(&p); err != nil {
			return err
		}
		// whoami runs through the registry as the job's user.
		if _, err := job.Invoke(ctx, "whoami", nil); err != nil {
			return err
		}
		done <- p.Text
		return nil
	})
	if err != nil {
		panic(err)
	}
	ann := exampleUser(srv, "ann")
	err = srv.Store().RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		// … the change that needs the job, in tx …
		return srv.Jobs().Enqueue(ctx, tx, "welcome", ann.UserID, map[string]string{"Text": "hello ann"})
	})
	if err != nil {
		panic(err)
	}
	bg, stopBG := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() { srv.RunBackground(bg); close(finished) }()
	defer func() { stopBG(); <-finished }()
	select {
	case text := <-done:
		fmt.Println("job ran:", text)
	case <-time.After(15 * time.Second):
		fmt.Println("timed out")
	}
	// Output: job ran: hello ann
}

// A schedule runs once per period across every replica (an SQL lease
// decides which).
func ExampleServer_Schedules() {
	srv, stop := exampleServer(enclave.Config{})
	defer stop()
	ticked := make(chan string, 1)
	err := srv.Schedules().Add(schedules.Schedule{Name: "cleanup", Every: time.Second, Run: func(ctx context.Context, t schedules.Tick) error {
		select {
		case ticked <- t.Name:
		default:
		}
		return nil
	}})
	if err != nil {
		panic(err)
	}
	bg, stopBG := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() { srv.RunBackground(bg); close(finished) }()
	defer func() { stopBG(); <-finished }()
	select {
	case name := <-ticked:
		fmt.Println("tick:", name)
	case <-time.After(15 * time.Second):
		fmt.Println("timed out")
	}
	// Output: tick: cleanup
}

// Feature flags: admins turn them on with adminFeatureSet; a capability
// that requires a flag is hidden until then, from the next call on.
func ExampleServer_Features() {
	srv, stop := exampleServer(enclave.Config{})
	defer stop()
	ctx := context.Background()
	err := srv.Registry().Register(capabilities.Define(capabilities.Spec[struct{}, struct{}]{
		Name: "betaSearch", Domain: "search", Description: "A search still in beta.",
		Annotations: &capabilities.Annotations{ReadOnly: true},
		Requires:    capabilities.Requirement{Feature: "beta-search"},
		Handler:     func(context.Context, *capabilities.Call, struct{}) (struct{}, error) { return struct{}{}, nil },
	}))
	if err != nil {
		panic(err)
	}
	admin, ann := exampleUser(srv, "ada", capabilities.RoleAdmin), exampleUser(srv, "ann")
	fmt.Println("before:", srv.Registry().IsVisible(ctx, ann, "betaSearch"))
	_, err = srv.Registry().Invoke(ctx, admin, "adminFeatureSet", json.RawMessage(`{"name":"beta-search","enabled":true}`))
	fmt.Println("set:", err == nil)
	fmt.Println("after:", srv.Registry().IsVisible(ctx, ann, "betaSearch"))
	// Output:
	// before: false
	// set: true
	// after: true
}

// Daily limits per capability class: a refusal says when to retry.
func ExampleConfig_quotaLimits() {
	srv, stop := exampleServer(enclave.Config{QuotaLimits: quota.Limits{
		Daily:   map[string]int64{quota.DefaultClass: 100, "search": 2},
		Classes: map[string]string{"capabilitiesSearch": "search"},
	}})
	defer stop()
	ctx := context.Background()
	ann := exampleUser(srv, "ann")
	for range 3 {
		_, err := srv.Registry().Invoke(ctx, ann, "capabilitiesSearch", json.RawMessage(`{"query":"secret"}`))
		var e *capabilities.Error
		if errors.As(err, &e) {
			at, ok := capabilities.RetryAfterOf(err)
			fmt.Println(e.Code, "retry at midnight UTC:", ok && at.Hour() == 0 && at.After(time.Now()))
			continue
		}
		fmt.Println("allowed:", err == nil)
	}
	// Output:
	// allowed: true
	// allowed: true
	// quota_exceeded retry at midnight UTC: true
}
