package mail_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// TestMailReviewConcurrentSameMessageIDKeepsOwnBlobs: deliveries racing
// with the same Message-ID but different bytes (an attacker who knows the
// Message-ID of a message about to arrive) are stored once, and the
// stored message's raw MIME and attachments are its own, never the bytes
// of a racing delivery that lost.
func TestMailReviewConcurrentSameMessageIDKeepsOwnBlobs(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, mail.Config{})
		alice := e.user("alice")
		for round := range 6 {
			raceRound(t, e, alice, round)
		}
		// The losers' blobs are gone: only the winners' raw MIME and
		// attachments remain (one raw and one attachment per round).
		var keys []string
		it := s.Bucket.List(nil)
		for {
			obj, err := it.Next(t.Context())
			if err != nil {
				break
			}
			keys = append(keys, obj.Key)
		}
		if len(keys) != 12 {
			t.Fatalf("blobs left after racing deliveries: %d, want 12: %v", len(keys), keys)
		}
	})
}

func raceRound(t *testing.T, e *env, alice capabilities.Caller, round int) {
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw := message(fmt.Sprintf("race%d@elsewhere.test", round), "race", "", fmt.Sprintf("variant-%d", i), []byte(fmt.Sprintf("payload-%d", i)))
			if _, err := e.svc.Deliver(t.Context(), mail.Delivery{Recipient: "alice@" + domain, Raw: raw}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("deliver: %v", err)
	}
	l := must[mail.ListOutput](e, alice, "mailList", map[string]any{})
	if len(l.Messages) != round+1 {
		t.Fatalf("stored %d messages, want %d", len(l.Messages), round+1)
	}
	msg := must[mail.Message](e, alice, "mailRead", map[string]any{"messageId": l.Messages[0].ID})
	variant := strings.TrimPrefix(strings.TrimSpace(msg.Text), "variant-")
	if len(msg.Attachments) != 1 {
		t.Fatalf("attachments: %+v", msg.Attachments)
	}
	page := must[mail.AttachmentPage](e, alice, "mailAttachmentGet", map[string]any{"attachmentId": msg.Attachments[0].ID})
	data, _ := base64.StdEncoding.DecodeString(page.DataBase64)
	if string(data) != "payload-"+variant {
		t.Fatalf("message text is variant %s but its attachment holds %q: a losing delivery overwrote the stored blobs", variant, data)
	}
}
