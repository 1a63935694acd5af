package mcp

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// deliveryWriter is the response writer of a request the package
// answers: it serializes writes, so that the request's notifications and
// questions (sent by its handler, or by mcp-go's engine) go on the
// request's event stream between one another and before the answer, and
// nothing after it.
type deliveryWriter struct {
	w       http.ResponseWriter
	mu      sync.Mutex
	started bool // status line sent

	// record, when set, records an event of the stream for resumption and
	// returns its id ("" when it could not be recorded): set for sessions
	// whose streams are resumable.
	record func(data []byte) string
	// answered is set once the request is answered (or given up on):
	// nothing is sent after that.
	answered bool
	// writeTimeout bounds the write of an event sent with send.
	writeTimeout time.Duration
}

func newDeliveryWriter(w http.ResponseWriter) *deliveryWriter {
	return &deliveryWriter{w: w, writeTimeout: eventWriteTimeout}
}

func (d *deliveryWriter) Header() http.Header { return d.w.Header() }

// WriteHeader sends the status once; the stream may already have been
// opened by send.
func (d *deliveryWriter) WriteHeader(status int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.started {
		d.started = true
		d.w.WriteHeader(status)
	}
}

func (d *deliveryWriter) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.started = true
	return d.w.Write(p)
}

// Flush sends what was written.
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

// finish ends a request with its answer body: from now on send refuses.
// If the response became an event stream, the answer is recorded for resumption and,
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
