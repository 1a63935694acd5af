package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A page whose capability call failed answers the code's status; a quota
// refusal answers 429 with Retry-After until the reset; an internal error
// shows no detail.
func TestRenderCapabilityError(t *testing.T) {
	h := newTestHandler(t, storagetest.Open(t, "sqlite"), nil)
	reset := time.Now().Add(90 * time.Second)
	quota := &capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached", RetryAfter: reset}
	for _, tc := range []struct {
		err        error
		status     int
		retryAfter bool
		shows      string
		hides      string
	}{
		// The registry wraps the quota's error in its own: the reset time still shows.
		{&capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached", Err: quota}, http.StatusTooManyRequests, true, "Daily limit reached.", ""},
		{capabilities.Errorf(capabilities.CodeNotFound, "no such note"), http.StatusNotFound, false, "No such note.", ""},
		{capabilities.Errorf(capabilities.CodeAccountSuspended, "this account is suspended"), http.StatusForbidden, false, "suspended", ""},
		{fmt.Errorf("wrapped: %w", errors.New("db password=hunter2")), http.StatusInternalServerError, false, "went wrong", "hunter2"},
	} {
		rec := httptest.NewRecorder()
		got := h.renderCapabilityError(rec, httptest.NewRequest("POST", "/notes", nil), tc.err)
		body := rec.Body.String()
		if got != tc.status || rec.Code != tc.status || !strings.Contains(body, tc.shows) || (tc.hides != "" && strings.Contains(body, tc.hides)) {
			t.Errorf("%v: status %d/%d, body %.200s", tc.err, got, rec.Code, body)
		}
		ra := rec.Header().Get("Retry-After")
		if tc.retryAfter {
			if secs, err := strconv.Atoi(ra); err != nil || secs < 80 || secs > 91 {
				t.Errorf("Retry-After %q, want about 90", ra)
			}
		} else if ra != "" {
			t.Errorf("%v: Retry-After %q", tc.err, ra)
		}
	}
}

// The admin pages' invokeFailed answers through the same table: a quota
// refusal is a 429 with Retry-After (it was a 400), a conflict a 409, and
// an internal error a 500 without detail.
func TestInvokeFailedUsesTheOneTable(t *testing.T) {
	h := newTestHandler(t, storagetest.Open(t, "sqlite"), nil)
	quota := &capabilities.Error{Code: capabilities.CodeQuotaExceeded, Message: "daily limit reached", RetryAfter: time.Now().Add(time.Minute)}
	for _, tc := range []struct {
		err    error
		status int
		header string
	}{
		{quota, http.StatusTooManyRequests, "Retry-After"},
		{capabilities.Errorf(capabilities.CodeConflict, "already taken"), http.StatusConflict, ""},
		{capabilities.Errorf(capabilities.CodeNotFound, "no such user"), http.StatusNotFound, ""},
		{capabilities.Errorf(capabilities.CodeInternal, "db password=hunter2"), http.StatusInternalServerError, ""},
	} {
		rec := httptest.NewRecorder()
		h.invokeFailed(rec, httptest.NewRequest("POST", "/admin/users", nil), "admin action", tc.err)
		if rec.Code != tc.status || strings.Contains(rec.Body.String(), "hunter2") {
			t.Errorf("%v: status %d, body %.200s", tc.err, rec.Code, rec.Body.String())
		}
		if tc.header != "" && rec.Header().Get(tc.header) == "" {
			t.Errorf("%v: no %s header", tc.err, tc.header)
		}
	}
}
