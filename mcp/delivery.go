package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// deliveryWriter is the response writer mcp-go gets for each request. It
// serializes writes, so that the transport can put its own messages on the
// request's event stream between mcp-go's, and counts the notifications
// written.
//
// mcp-go forwards a request's notifications from a goroutine, and once the
// handler has returned it closes the stream under a lock that the
// forwarder may be waiting for: a notification taken off the channel but
// not yet written is then dropped. Handlers therefore wait (see settle)
// until every notification they sent has been written before returning.
type deliveryWriter struct {
	w       http.ResponseWriter
	mu      sync.Mutex
	started bool // status line sent
	written atomic.Int64
	wrote   chan struct{} // signalled after each notification write

	// replacement, when set, is the JSON-RPC error written instead of the
	// error response mcp-go writes for the request (see replaceError).
	replacement []byte
	replaceAny  bool // replace the response, not only an error response
	replaced    bool
	// replaceStatus is the HTTP status of a replacement error on a plain
	// JSON response.
	replaceStatus int

	// record, when set, records an event of the stream for resumption and
	// returns its id ("" when it could not be recorded): set by the direct
	// path for sessions whose streams are resumable.
	record func(data []byte) string
	// answered is set once the direct path has answered the request (or
	// given up on it): nothing is sent after that.
	answered bool
	// writeTimeout bounds the write of an event sent with send.
	writeTimeout time.Duration
}

var notificationMark = []byte(`"method":"notifications/`)

func newDeliveryWriter(w http.ResponseWriter) *deliveryWriter {
	return &deliveryWriter{w: w, wrote: make(chan struct{}, 1), writeTimeout: eventWriteTimeout}
}

func (d *deliveryWriter) Header() http.Header { return d.w.Header() }

// WriteHeader sends the status once; the stream may already have been
// opened by send.
func (d *deliveryWriter) WriteHeader(status int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.replacement != nil && !d.replaceAny && !strings.HasPrefix(d.w.Header().Get("Content-Type"), "text/event-stream") {
		status = d.replaceStatus
	}
	if !d.started {
		d.started = true
		d.w.WriteHeader(status)
	}
}

func (d *deliveryWriter) Write(p []byte) (int, error) {
	d.mu.Lock()
	// Only the request's response is replaced, never a notification on its
	// stream (a log message of level "error" contains `"error"` too).
	if d.replacement != nil && !d.replaced && !bytes.Contains(p, notificationMark) && (d.replaceAny || bytes.Contains(p, []byte(`"error"`))) {
		d.replaced = true
		d.started = true
		var err error
		if strings.HasPrefix(d.w.Header().Get("Content-Type"), "text/event-stream") {
			_, err = fmt.Fprintf(d.w, "event: message\ndata: %s\n\n", d.replacement)
		} else {
			_, err = d.w.Write(append(d.replacement, '\n'))
		}
		d.mu.Unlock()
		return len(p), err
	}
	d.started = true
	n, err := d.w.Write(p)
	d.mu.Unlock()
	if bytes.Contains(p, notificationMark) {
		d.written.Add(1)
		select {
		case d.wrote <- struct{}{}:
		default:
		}
	}
	return n, err
}

// replaceErrorBody makes the JSON-RPC error response mcp-go writes for
// this request (a handler's error, which it always calls internal) body
// instead, with status on a plain JSON response (an event stream has
// already sent 200): the transport's refusals carry codes and data mcp-go
// cannot carry from a handler (see reqState.refuseCall).
func (d *deliveryWriter) replaceErrorBody(body []byte, status int) {
	d.mu.Lock()
	d.replacement, d.replaceStatus = body, status
	d.mu.Unlock()
}

// replaceResponse makes the response mcp-go writes for this request body
// instead (a complete JSON-RPC response): for results mcp-go has no type
// for, such as a CreateTaskResult.
func (d *deliveryWriter) replaceResponse(body []byte) {
	d.mu.Lock()
	d.replacement, d.replaceAny = body, true
	d.mu.Unlock()
}

// Flush is what lets mcp-go stream at all.
func (d *deliveryWriter) Flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f, ok := d.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (d *deliveryWriter) Unwrap() http.ResponseWriter { return d.w }

func (d *deliveryWriter) streams() bool {
	_, ok := d.w.(http.Flusher)
	return ok
}

var errNotStreaming = errors.New("mcp: the response is not an event stream")

// send writes one JSON-RPC message as an event of the request's stream,
// opening the stream if nothing was written yet.
func (d *deliveryWriter) send(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("mcp: encode message: %w", err)
	}
	return d.sendRaw(b)
}

// sendRaw is send for a message already encoded.
func (d *deliveryWriter) sendRaw(b []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.answered {
		return errAnswered
	}
	return d.sendLocked(b)
}

func (d *deliveryWriter) sendLocked(b []byte) error {
	if !d.started {
		h := d.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		d.w.WriteHeader(http.StatusOK)
		d.started = true
	} else if !strings.HasPrefix(d.w.Header().Get("Content-Type"), "text/event-stream") {
		return errNotStreaming
	}
	var id string
	if d.record != nil {
		id = d.record(b)
	}
	// The writer is the handler itself (a progress report, a log message,
	// a question): a client that stops reading must not hold it, and
	// whatever it holds, for longer than eventWriteTimeout. The server
	// sets no write timeout of its own (streams are long), so none is
	// lost by clearing the deadline after the event.
	rc := http.NewResponseController(d.w)
	if d.writeTimeout > 0 && rc.SetWriteDeadline(time.Now().Add(d.writeTimeout)) == nil {
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	}
	var err error
	if id != "" && !strings.ContainsAny(id, "\r\n") {
		_, err = fmt.Fprintf(d.w, "id: %s\nevent: message\ndata: %s\n\n", id, b)
	} else {
		_, err = fmt.Fprintf(d.w, "event: message\ndata: %s\n\n", b)
	}
	if err != nil {
		return fmt.Errorf("mcp: write event: %w", err)
	}
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("mcp: write event: %w", err)
	}
	return nil
}

// eventWriteTimeout bounds how long writing one event that a handler sends
// (send) may block on a client that does not read.
const eventWriteTimeout = 30 * time.Second

// errAnswered is what sending on a request's stream returns once the
// request was answered (or abandoned): nothing may follow the answer, and
// nothing may be written once the handler has returned (a handler's
// goroutine that outlives it would otherwise write to a response net/http
// has already finished and recycled).
var errAnswered = errors.New("mcp: the request has been answered")

// finish ends a direct-path request with its answer body (see direct.go):
// from now on send refuses. If the response became an event stream, the
// answer (or the replacement set for it) is recorded for resumption and,
// when write is true, written as the stream's last event; streamed reports
// whether it did. Otherwise the caller writes the plain JSON answer.
func (d *deliveryWriter) finish(body []byte, write bool) (streamed bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.answered {
		return false, errAnswered
	}
	d.answered = true
	if !d.started || !strings.HasPrefix(d.w.Header().Get("Content-Type"), "text/event-stream") {
		return false, nil
	}
	if d.replacement != nil && !d.replaced && (d.replaceAny || bytes.Contains(body, []byte(`"error"`))) {
		d.replaced = true
		body = d.replacement
	}
	if !write {
		if d.record != nil {
			d.record(body)
		}
		return true, nil
	}
	return true, d.sendLocked(body)
}

// abandon makes every later send refuse, without an answer.
func (d *deliveryWriter) abandon() {
	d.mu.Lock()
	d.answered = true
	d.mu.Unlock()
}

// settle waits until the request's sent notifications are written, or ctx
// ends. Without a streaming response mcp-go drops notifications, so there is
// nothing to wait for.
func (st *reqState) settle(ctx context.Context) {
	d := st.out
	if d == nil || !d.streams() {
		return
	}
	for d.written.Load() < st.sent.Load() {
		select {
		case <-d.wrote:
		case <-ctx.Done():
			return
		}
	}
}

// clientAnswer is a client's response to a request the server sent it.
type clientAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// pendingRequests are the server-to-client requests awaiting an answer, by
// session and request id: only the session that received a request can
// answer it.
type pendingRequests struct {
	prefix string // "enclave-" and, in a cluster, this replica's bus id
	mu     sync.Mutex
	m      map[string]chan clientAnswer
}

func pendingKey(sid string, id json.RawMessage) string { return sid + "\x00" + string(id) }

func (p *pendingRequests) add(sid string) (json.RawMessage, chan clientAnswer, func()) {
	prefix := p.prefix
	if prefix == "" {
		prefix = "enclave-"
	}
	// Random, not a counter: the id reaches the client, and a counter would
	// tell it how many requests the replica sent other sessions meanwhile.
	var b [12]byte
	_, _ = rand.Read(b[:])
	id, _ := json.Marshal(prefix + hex.EncodeToString(b[:]))
	ch := make(chan clientAnswer, 1)
	key := pendingKey(sid, id)
	p.mu.Lock()
	if p.m == nil {
		p.m = map[string]chan clientAnswer{}
	}
	p.m[key] = ch
	p.mu.Unlock()
	return id, ch, func() {
		p.mu.Lock()
		delete(p.m, key)
		p.mu.Unlock()
	}
}

// answer delivers a response and reports whether a request was waiting.
func (p *pendingRequests) answer(sid string, id json.RawMessage, a clientAnswer) bool {
	p.mu.Lock()
	ch, ok := p.m[pendingKey(sid, bytes.TrimSpace(id))]
	delete(p.m, pendingKey(sid, bytes.TrimSpace(id)))
	p.mu.Unlock()
	if ok {
		ch <- a
	}
	return ok
}
