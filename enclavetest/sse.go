package enclavetest

import (
	"bytes"
	"mime"
)

// Message returns the JSON-RPC message of an answer from /mcp given its
// Content-Type and body: a JSON body as it is, or the data of the last event
// of a text/event-stream body (the response follows any notifications of
// the stream). Several data lines of one event are joined with newlines, as
// the SSE format says. An event stream without data gives nil.
//
// Tests that post to /mcp by hand read the answer with it, whichever of the
// two forms the server chose.
func Message(contentType string, body []byte) []byte {
	if mt, _, err := mime.ParseMediaType(contentType); err != nil || mt != "text/event-stream" {
		return body
	}
	events := Events(body)
	if len(events) == 0 {
		return nil
	}
	return events[len(events)-1].Data
}

// Event is one event of a text/event-stream body.
type Event struct {
	ID    string // the id field, if any
	Event string // the event field, if any
	Data  []byte // the data lines, joined with newlines
}

// Events parses a text/event-stream body into its events (comments and
// events without data are dropped; a last event the body ends in without
// its blank line counts, as a test reading a cut stream wants).
func Events(body []byte) []Event {
	var out []Event
	var cur Event
	var data [][]byte
	hasData := false
	flush := func() {
		if hasData {
			cur.Data = bytes.Join(data, []byte("\n"))
			out = append(out, cur)
		}
		cur, data, hasData = Event{}, nil, false
	}
	for line := range bytes.Lines(body) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			flush()
			continue
		}
		if line[0] == ':' {
			continue // a comment
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			data, hasData = append(data, value), true
		case "event":
			cur.Event = string(value)
		case "id":
			cur.ID = string(value)
		}
	}
	flush()
	return out
}
