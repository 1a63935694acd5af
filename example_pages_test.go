package enclave_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/a-h/templ"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/web"
)

// An embedder's own page in the web shell: mounted after New, rendered in
// the shell's branded layout. A page that is not Public asks for sign-in
// first, and PageContext.Invoke runs capabilities as the signed-in person
// (see examples/pages).
func ExampleServer_Web() {
	srv, stop := exampleServer(enclave.Config{SiteName: "Acme"})
	defer stop()
	err := srv.Web().Mount(web.Page{Pattern: "GET /hello", Public: true, Handler: func(c *web.PageContext) {
		c.Render(http.StatusOK, "Hello", templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
			_, err := io.WriteString(w, "<h1>Hello from "+templ.EscapeString(c.SiteName())+"</h1>")
			return err
		}))
	}})
	if err != nil {
		panic(err)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/hello", nil))
	body := rec.Body.String()
	fmt.Println(rec.Code, strings.Contains(body, "<title>Hello · Acme</title>"), strings.Contains(body, "<h1>Hello from Acme</h1>"))
	// Output: 200 true true
}
