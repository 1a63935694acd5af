package events_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The receiver's side of a webhook, as docs/events.md shows it (a test
// checks the page carries this exact function).

// --- verifier: begin ---

// VerifyWebhook checks one enclave webhook request: the signature over
// "<timestamp>.<body>" with the subscription's secret, and a timestamp no
// more than five minutes from now, so a captured request cannot be
// replayed later. Read the body in full first and pass it unchanged.
func VerifyWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	ts, err := strconv.ParseInt(h.Get("Enclave-Timestamp"), 10, 64)
	if err != nil {
		return errors.New("webhook: missing or malformed Enclave-Timestamp")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return errors.New("webhook: timestamp outside the tolerance (replayed or clock skew)")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.", ts)
	mac.Write(body)
	want := mac.Sum(nil)
	for _, part := range strings.Split(h.Get("Enclave-Signature"), ",") {
		sig, ok := strings.CutPrefix(strings.TrimSpace(part), "v1=")
		if !ok {
			continue
		}
		got, err := hex.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("webhook: signature mismatch")
}

// --- verifier: end ---
