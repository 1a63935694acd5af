// Command pages is an enclave embedder that brands the web shell and adds
// pages of its own: a "Greetings" page that signed-in people use from the
// browser, calling the same capability agents call over MCP, inside the
// shell's layout, with its session, cross-origin protection and
// Registry.Invoke. It serves at http://127.0.0.1:8080.
package main

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/a-h/templ"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/web"
)

type greetIn struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

type greetOut struct {
	Greeting string `json:"greeting"`
}

// greet is an ordinary capability: agents call it over MCP, and the page
// below calls it too, through Registry.Invoke as the signed-in person.
var greet = capabilities.Define(capabilities.Spec[greetIn, greetOut]{
	Name:        "greet",
	Domain:      "hello",
	Title:       "Greet",
	Description: "Greets someone by name on behalf of the signed-in user.",
	Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
	Handler: func(_ context.Context, call *capabilities.Call, in greetIn) (greetOut, error) {
		if in.Name == "" {
			return greetOut{}, capabilities.Errorf(capabilities.CodeInvalidInput, "Enter a name to greet.")
		}
		return greetOut{Greeting: fmt.Sprintf("Hello, %s, from %s!", in.Name, call.Caller.Username)}, nil
	},
})

// greetTemplate is the page's body; html/template escapes what it writes.
// The layout around it (header, navigation, stylesheet) is the shell's.
var greetTemplate = template.Must(template.New("greet").Parse(`
<h1>Greetings</h1>
<form class="card" method="post" action="{{.Action}}">
	{{if .Error}}<p class="error" role="alert">{{.Error}}</p>{{end}}
	<label for="name">Name</label>
	<input id="name" name="name" type="text" required value="{{.Name}}">
	<button type="submit">Greet</button>
</form>
{{if .Greeting}}<section class="card"><p id="greeting">{{.Greeting}}</p></section>{{end}}
`))

type greetView struct {
	Action                string
	Name, Error, Greeting string
}

// body renders v with greetTemplate as a templ component.
func body(v greetView) templ.Component {
	return templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		return greetTemplate.Execute(w, v)
	})
}

// logo is served by a public page of its own; the layout shows it (the
// pages load images from their own origin only).
const logo = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><circle cx="16" cy="16" r="14" fill="#0f766e"/></svg>`

// config is the server's configuration: its name, description and colours.
func config() enclave.Config {
	return enclave.Config{
		DataDir:         "pages-data",
		SiteName:        "Greeter",
		SiteDescription: "Greetings for the whole team, from your AI agent or from this page.",
		LogoURL:         "/brand/logo.svg",
		AccentColor:     "#0f766e",
	}
}

// setup registers the capability and mounts the pages on srv.
func setup(srv *enclave.Server) error {
	if err := srv.Registry().Register(greet); err != nil {
		return err
	}
	return srv.Web().Mount(
		web.Page{Pattern: "GET /greet", Nav: "Greetings", Handler: func(c *web.PageContext) {
			c.Render(http.StatusOK, "Greetings", body(greetView{Action: string(c.URL("/greet"))}))
		}},
		web.Page{Pattern: "POST /greet", Handler: func(c *web.PageContext) {
			form, ok := c.Form()
			if !ok {
				return // answered with the 400 page
			}
			v := greetView{Action: string(c.URL("/greet")), Name: form.Get("name")}
			var out greetOut
			err := c.Invoke("greet", greetIn{Name: v.Name}, &out)
			if ce, ok := errors.AsType[*capabilities.Error](err); ok && ce.Code == capabilities.CodeInvalidInput {
				v.Error = ce.Message // a mistake in the form: show it there
				c.Render(http.StatusUnprocessableEntity, "Greetings", body(v))
				return
			}
			if err != nil {
				c.Fail(err)
				return
			}
			v.Greeting = out.Greeting
			c.Render(http.StatusOK, "Greetings", body(v))
		}},
		web.Page{Pattern: "GET /brand/logo.svg", Public: true, Handler: func(c *web.PageContext) {
			c.Writer.Header().Set("Content-Type", "image/svg+xml")
			c.Writer.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; sandbox")
			c.Writer.Header().Set("Cache-Control", "public, max-age=3600")
			_, _ = io.WriteString(c.Writer, logo)
		}},
	)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	srv, err := enclave.New(ctx, config())
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := setup(srv); err != nil {
		return err
	}
	return srv.Run(ctx)
}
