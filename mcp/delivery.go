package mcp

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
)

// deliveryWriter counts the notifications written to a response stream.
//
// mcp-go forwards a request's notifications from a goroutine, and once the
// handler has returned it closes the stream under a lock that the
// forwarder may be waiting for: a notification taken off the channel but
// not yet written is then dropped. Handlers therefore wait (see settle)
// until every notification they sent has been written before returning.
type deliveryWriter struct {
	http.ResponseWriter
	written atomic.Int64
	wrote   chan struct{} // signalled after each notification write
}

var notificationMark = []byte(`"method":"notifications/`)

func newDeliveryWriter(w http.ResponseWriter) *deliveryWriter {
	return &deliveryWriter{ResponseWriter: w, wrote: make(chan struct{}, 1)}
}

func (d *deliveryWriter) Write(p []byte) (int, error) {
	n, err := d.ResponseWriter.Write(p)
	if bytes.Contains(p, notificationMark) {
		d.written.Add(1)
		select {
		case d.wrote <- struct{}{}:
		default:
		}
	}
	return n, err
}

// Flush is what lets mcp-go stream at all.
func (d *deliveryWriter) Flush() {
	if f, ok := d.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (d *deliveryWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

func (d *deliveryWriter) streams() bool {
	_, ok := d.ResponseWriter.(http.Flusher)
	return ok
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
