package capabilities

// Result is what a capability returns: content blocks for the model, and
// optionally structured content matching the capability's output schema.
type Result struct {
	Content []Content
	// Structured, when non-nil, is sent as structured content; it must
	// marshal to a JSON object.
	Structured any
	// IsError marks a result that reports a failure the model should see
	// (as opposed to a protocol error).
	IsError bool
}

// Content is one block of a result or prompt message: Text, Image, Audio,
// EmbeddedResource or ResourceLink.
type Content interface{ content() }

// Text is plain text.
type Text struct{ Text string }

// Image is an image, sent base64-encoded.
type Image struct {
	Data     []byte
	MIMEType string
}

// Audio is an audio clip, sent base64-encoded.
type Audio struct {
	Data     []byte
	MIMEType string
}

// EmbeddedResource is a resource carried inline.
type EmbeddedResource struct{ Contents ResourceContents }

// ResourceLink points at a resource the client may read.
type ResourceLink struct {
	URI, Name, Description, MIMEType string
}

func (Text) content()             {}
func (Image) content()            {}
func (Audio) content()            {}
func (EmbeddedResource) content() {}
func (ResourceLink) content()     {}

// ResourceContents is the contents of one resource. Exactly one of Text and
// Blob is meaningful: Blob when it is non-nil.
type ResourceContents struct {
	URI      string
	MIMEType string
	Text     string
	Blob     []byte
}

// TextResult is a result with one text block.
func TextResult(text string) Result { return Result{Content: []Content{Text{Text: text}}} }

// ErrorResult is a result reporting a failure to the model.
func ErrorResult(text string) Result {
	return Result{Content: []Content{Text{Text: text}}, IsError: true}
}
