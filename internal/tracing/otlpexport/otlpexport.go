// Package otlpexport builds the OpenTelemetry SDK tracer provider the
// binary uses when --otlp-endpoint is set: spans batched and sent with
// OTLP over HTTP (protobuf), under the resource service.name=enclave. It
// is the only package linking the SDK and the exporter on purpose; the
// library takes any trace.TracerProvider (enclave.Config.TracerProvider).
package otlpexport

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/net/http/httpguts"
)

// Options configure New.
type Options struct {
	// Endpoint is the collector's OTLP/HTTP URL: http:// or https://,
	// host and port, and optionally the path spans are posted to (default
	// /v1/traces), e.g. http://localhost:4318.
	Endpoint string
	// Headers are sent with every export (an API key, say). The exporter
	// also reads OTEL_EXPORTER_OTLP_HEADERS and
	// OTEL_EXPORTER_OTLP_TRACES_HEADERS; these win over them.
	Headers map[string]string
	// Version is the service.version of the resource.
	Version string
	// Batch options, for tests (default the SDK's: a 5 s batch timeout).
	Batch []sdktrace.BatchSpanProcessorOption
}

// New returns a tracer provider exporting to o.Endpoint. Shut it down
// (Shutdown) on exit: that flushes the spans still batched.
func New(ctx context.Context, o Options) (*sdktrace.TracerProvider, error) {
	opts, err := endpointOptions(o.Endpoint)
	if err != nil {
		return nil, err
	}
	if len(o.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(o.Headers))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "enclave")}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		res = resource.NewSchemaless(attrs...)
	}
	popts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(validUTF8{exp}, o.Batch...), sdktrace.WithResource(res)}
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		// Every request is recorded, whatever the caller's traceparent
		// says: a caller's "not sampled" flag must not hide its requests
		// from the operator. OTEL_TRACES_SAMPLER, when set, decides instead.
		popts = append(popts, sdktrace.WithSampler(sdktrace.AlwaysSample()))
	}
	return sdktrace.NewTracerProvider(popts...), nil
}

// CheckEndpoint reports whether endpoint is an OTLP/HTTP URL New accepts.
func CheckEndpoint(endpoint string) error {
	_, err := endpointOptions(endpoint)
	return err
}

// endpointOptions turns an endpoint URL into the exporter's options.
func endpointOptions(endpoint string) ([]otlptracehttp.Option, error) {
	u, err := url.Parse(strings.TrimSpace(endpoint))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("the OTLP endpoint must be an http:// or https:// URL with a host and no query, e.g. http://localhost:4318")
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host)}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		opts = append(opts, otlptracehttp.WithURLPath(p))
	} else {
		opts = append(opts, otlptracehttp.WithURLPath("/v1/traces"))
	}
	return opts, nil
}

// ParseHeaders reads "key=value,key2=value2" (the OTEL_EXPORTER_OTLP_HEADERS
// format; values may be URL-encoded).
func ParseHeaders(s string) (map[string]string, error) {
	out := map[string]string{}
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, errors.New(`OTLP headers must be key=value pairs separated by commas, e.g. "x-api-key=abc"`)
		}
		if dv, err := url.QueryUnescape(strings.TrimSpace(v)); err == nil {
			v = dv
		}
		v = strings.TrimSpace(v)
		// Checked here, once: net/http would refuse every export of a
		// header it cannot send, and the spans would be lost in silence.
		// The error names the header, never its value (an API key).
		if !httpguts.ValidHeaderFieldName(k) {
			// Not echoed: "key: secret=..." (a colon for the =) would
			// put the secret in the name.
			return nil, errors.New(`an OTLP header name is not a valid HTTP header name (letters, digits and "-" before the "=")`)
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("the value of OTLP header %q holds a character an HTTP header cannot (a line break or control character)", k)
		}
		out[k] = v
	}
	return out, nil
}

// validUTF8 is an exporter that makes every string of a span valid UTF-8
// before exp sees it: the OTLP protobuf refuses an invalid string, and
// with it the whole batch, so one attribute holding a client's raw bytes
// would drop every other request's spans of the batch (a caller could
// hide its requests from the operator that way).
type validUTF8 struct{ sdktrace.SpanExporter }

func (v validUTF8) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	var out []sdktrace.ReadOnlySpan
	for i, s := range spans {
		if spanValid(s) {
			if out != nil {
				out = append(out, s)
			}
			continue
		}
		if out == nil {
			out = append(make([]sdktrace.ReadOnlySpan, 0, len(spans)), spans[:i]...)
		}
		out = append(out, fixedSpan{s})
	}
	if out == nil {
		out = spans
	}
	return v.SpanExporter.ExportSpans(ctx, out)
}

func spanValid(s sdktrace.ReadOnlySpan) bool {
	if !utf8.ValidString(s.Name()) || !utf8.ValidString(s.Status().Description) || !attrsValid(s.Attributes()) {
		return false
	}
	for _, e := range s.Events() {
		if !utf8.ValidString(e.Name) || !attrsValid(e.Attributes) {
			return false
		}
	}
	for _, l := range s.Links() {
		if !attrsValid(l.Attributes) {
			return false
		}
	}
	return true
}

func attrsValid(kvs []attribute.KeyValue) bool {
	for _, kv := range kvs {
		if !utf8.ValidString(string(kv.Key)) {
			return false
		}
		switch kv.Value.Type() {
		case attribute.STRING:
			if !utf8.ValidString(kv.Value.AsString()) {
				return false
			}
		case attribute.STRINGSLICE:
			for _, x := range kv.Value.AsStringSlice() {
				if !utf8.ValidString(x) {
					return false
				}
			}
		}
	}
	return true
}

func fixAttrs(kvs []attribute.KeyValue) []attribute.KeyValue {
	if attrsValid(kvs) {
		return kvs
	}
	out := make([]attribute.KeyValue, len(kvs))
	for i, kv := range kvs {
		k := attribute.Key(strings.ToValidUTF8(string(kv.Key), "\uFFFD"))
		switch kv.Value.Type() {
		case attribute.STRING:
			out[i] = k.String(strings.ToValidUTF8(kv.Value.AsString(), "\uFFFD"))
		case attribute.STRINGSLICE:
			xs := kv.Value.AsStringSlice()
			for j := range xs {
				xs[j] = strings.ToValidUTF8(xs[j], "\uFFFD")
			}
			out[i] = k.StringSlice(xs)
		default:
			out[i] = attribute.KeyValue{Key: k, Value: kv.Value}
		}
	}
	return out
}

// fixedSpan is a span whose strings are made valid UTF-8.
type fixedSpan struct{ sdktrace.ReadOnlySpan }

func (s fixedSpan) Name() string { return strings.ToValidUTF8(s.ReadOnlySpan.Name(), "\uFFFD") }

func (s fixedSpan) Attributes() []attribute.KeyValue { return fixAttrs(s.ReadOnlySpan.Attributes()) }

func (s fixedSpan) Status() sdktrace.Status {
	st := s.ReadOnlySpan.Status()
	st.Description = strings.ToValidUTF8(st.Description, "\uFFFD")
	return st
}

func (s fixedSpan) Events() []sdktrace.Event {
	evs := s.ReadOnlySpan.Events()
	out := make([]sdktrace.Event, len(evs))
	for i, e := range evs {
		e.Name = strings.ToValidUTF8(e.Name, "\uFFFD")
		e.Attributes = fixAttrs(e.Attributes)
		out[i] = e
	}
	return out
}

func (s fixedSpan) Links() []sdktrace.Link {
	ls := s.ReadOnlySpan.Links()
	out := make([]sdktrace.Link, len(ls))
	for i, l := range ls {
		l.Attributes = fixAttrs(l.Attributes)
		out[i] = l
	}
	return out
}
