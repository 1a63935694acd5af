// Package statuswriter owns the one http.ResponseWriter wrapper that
// records a response's status and size for the access log, the metrics
// and the tracing middleware. It keeps streaming working: Flush passes
// through, and Unwrap lets http.ResponseController reach the writer below.
package statuswriter

import "net/http"

// Writer records the status and size of the response written through it.
type Writer struct {
	http.ResponseWriter
	status int
	bytes  int64
}

// New wraps w.
func New(w http.ResponseWriter) *Writer { return &Writer{ResponseWriter: w} }

// Status is the response's status: the first one written, 200 when the
// body was written without one, 0 when nothing was written yet.
func (w *Writer) Status() int { return w.status }

// StatusOr200 is Status, 200 when nothing was written (net/http answers
// 200 to a handler that writes nothing).
func (w *Writer) StatusOr200() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Bytes is the size of the body written so far.
func (w *Writer) Bytes() int64 { return w.bytes }

// WriteHeader records the first status and passes it on.
func (w *Writer) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records the implicit 200 and the size, and passes b on.
func (w *Writer) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Flush passes through to the writer below when it flushes.
func (w *Writer) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the writer below, for http.ResponseController.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
