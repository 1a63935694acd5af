-- The trace id (32 hex characters, W3C Trace Context) of the request an
-- audit event was recorded in, when the server traces requests
-- (--otlp-endpoint): an operator goes from a row to its trace and back.
-- '' when tracing is off or the event was recorded outside a trace. A
-- caller that sends a traceparent chooses the id: it links, it proves
-- nothing.
ALTER TABLE audit_events ADD COLUMN trace_id TEXT NOT NULL DEFAULT '';
CREATE INDEX audit_events_trace_id ON audit_events (trace_id) WHERE trace_id <> '';
