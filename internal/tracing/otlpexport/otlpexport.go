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

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
	popts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp, o.Batch...), sdktrace.WithResource(res)}
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
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}
