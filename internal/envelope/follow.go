package envelope

import (
	"context"
	"strconv"
	"time"

	"github.com/enclave-mcp/enclave/cluster"
)

// TopicRotated is the bus topic on which a replica announces a new data
// key (payload: its id).
const TopicRotated = "envelope.rotated"

// Follow keeps the ring current across replicas: a rotation here is
// announced on bus, and one announced by another replica (or any gap in
// the bus, after which an announcement may have been missed) makes this
// ring load the keys again, so that Seal uses the new key at once rather
// than after a restart. The returned func stops following.
func (r *Ring) Follow(bus cluster.Bus, onErr func(error)) (stop func()) {
	reload := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.load(ctx); err != nil && onErr != nil {
			onErr(err)
		}
	}
	r.mu.Lock()
	r.announce = func(id int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := bus.Publish(ctx, TopicRotated, []byte(strconv.FormatInt(id, 10))); err != nil && onErr != nil {
			onErr(err)
		}
	}
	r.mu.Unlock()
	unsub := bus.Subscribe(TopicRotated, func(_ string, p []byte) {
		if id, err := strconv.ParseInt(string(p), 10, 64); err == nil && id == r.Current() {
			return // ours, or already loaded
		}
		go reload()
	})
	ungap := bus.OnGap(func() { go reload() })
	return func() {
		unsub()
		ungap()
		r.mu.Lock()
		r.announce = nil
		r.mu.Unlock()
	}
}
