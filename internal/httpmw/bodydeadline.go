package httpmw

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// DefaultBodyReadTimeout is the body read timeout a server uses unless told otherwise.
const DefaultBodyReadTimeout = 30 * time.Second

// BodyDeadline bounds how long a request body may take to arrive. The
// server's ReadHeaderTimeout only covers the headers, and a ReadTimeout
// would also end long streaming responses (MCP's SSE), so the deadline is
// set per request, on the connection, and cleared as soon as the body has
// been read to its end: a client trickling a body a byte at a time
// (slowloris) is cut off, and a long answer is not.
func BodyDeadline(timeout time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody clears the connection's read deadline once the body is
// read: what follows (the client closing a stream) must not time out.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}
