package lanes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Replicas racing for one lane: exactly one runs it per period; after the
// period another may.
func TestOneReplicaPerPeriod(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		var runs atomic.Int32
		lane := Lane{Name: "sweep", Every: time.Hour, Run: func(context.Context) error { runs.Add(1); return nil }}
		clock := time.Now().UTC()
		replicas := make([]*Scheduler, 4)
		for i := range replicas {
			replicas[i] = New(s.DB, nil, lane)
			replicas[i].now = func() time.Time { return clock }
		}
		var wg sync.WaitGroup
		for _, r := range replicas {
			wg.Go(func() {
				if _, err := r.Tick(ctx, lane); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if runs.Load() != 1 {
			t.Fatalf("%d replicas ran the lane in one period, want 1", runs.Load())
		}
		// Still the same period: nobody runs it again.
		if ran, _ := replicas[1].Tick(ctx, lane); ran {
			t.Fatal("ran twice in one period")
		}
		// The next period: one replica runs it.
		clock = clock.Add(time.Hour + time.Second)
		if ran, err := replicas[2].Tick(ctx, lane); !ran || err != nil {
			t.Fatalf("next period: ran=%v err=%v", ran, err)
		}
		// A failing run is reported and recorded.
		clock = clock.Add(2 * time.Hour)
		bad := Lane{Name: "sweep", Every: time.Hour, Run: func(context.Context) error { return errors.New("disk full") }}
		var seen []string
		replicas[0].OnRun = func(lane string, err error) { seen = append(seen, fmt.Sprint(lane, ":", err)) }
		if _, err := replicas[0].Tick(ctx, bad); err == nil {
			t.Fatal("the run's error was lost")
		}
		if len(seen) != 1 || seen[0] != "sweep:disk full" {
			t.Fatalf("OnRun saw %v", seen)
		}
		var last string
		if err := s.DB.NewSelect().Table("lane_leases").Column("last_error").Where("name = 'sweep'").Scan(ctx, &last); err != nil || last != "disk full" {
			t.Fatalf("last_error = %q, %v", last, err)
		}
	})
}

func TestRunStopsWithContext(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	ran := make(chan struct{}, 1)
	sched := New(s.DB, nil, Lane{Name: "quick", Every: 10 * time.Millisecond, Run: func(context.Context) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		return nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sched.Run(ctx); close(done) }()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the lane never ran")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
