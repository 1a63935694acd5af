package capabilities

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The review of the one-pass readers (#27): what the choke point checks
// (validRaw) and what the handler then gets (flatDecoder) must be what the
// decoding path checked and json.Unmarshal decoded before them, together,
// for every oddly spelled argument.

// reviewIn is a Define input whose schema validRaw checks (no bounds, no
// enum) and whose struct flatDecoder decodes.
type reviewIn struct {
	Text string   `json:"text"`
	N    int      `json:"n,omitempty"`
	Big  int64    `json:"big,omitempty"`
	X    *float64 `json:"x,omitempty"`
	F    float64  `json:"f,omitempty"`
	Flag bool     `json:"flag,omitempty"`
	P    *string  `json:"p,omitempty"`
	PI   *int     `json:"pi,omitempty"`
}

// reviewInvoked is what a call came to: the input the handler got, or the
// error that stopped it (its code and the sentence a client reads).
type reviewInvoked struct {
	In      reviewIn
	Code    Code
	Message string
}

// reviewCapability is a Define capability over reviewIn whose handler
// records its input in *got, validated as the registry validates it.
func reviewCapability(t testing.TB, got *reviewIn) *Capability {
	t.Helper()
	c := Define(Spec[reviewIn, Result]{Name: "review", Domain: "test", Description: "d", Annotations: &Annotations{ReadOnly: true},
		Handler: func(_ context.Context, _ *Call, in reviewIn) (Result, error) {
			*got = in
			return Result{}, nil
		}})
	if err := c.validate(builtin, capabilityName); err != nil {
		t.Fatal(err)
	}
	if c.flat == nil {
		t.Fatalf("schema %s is not compiled: the review would not reach validRaw", c.InputSchema)
	}
	return &c
}

// invokeFast is validateInput then the handler, as Registry.invoke runs
// them, with the one-pass readers.
func invokeFast(c *Capability, got *reviewIn, args string) reviewInvoked {
	*got = reviewIn{}
	checked, err := c.validateInput(json.RawMessage(args))
	if err == nil {
		_, err = c.Handler(context.Background(), &Call{}, checked)
	}
	return reviewOutcome(*got, err)
}

// invokeSlow is what main did: the decoding path's check (no compiled
// check at all) and json.Unmarshal into the input.
func invokeSlow(c *Capability, args string) reviewInvoked {
	flat := c.flat
	c.flat = nil
	checked, err := c.validateInput(json.RawMessage(args))
	c.flat = flat
	var in reviewIn
	if err == nil && !absent(checked) {
		if uerr := json.Unmarshal(checked, &in); uerr != nil {
			in, err = reviewIn{}, &Error{Code: CodeInvalidInput, Message: "arguments do not match the input schema", Err: uerr}
		}
	}
	return reviewOutcome(in, err)
}

func reviewOutcome(in reviewIn, err error) reviewInvoked {
	if err == nil {
		return reviewInvoked{In: in}
	}
	var e *Error
	if !errors.As(err, &e) {
		return reviewInvoked{Code: "not a capabilities error", Message: err.Error()}
	}
	return reviewInvoked{Code: e.Code, Message: e.Message}
}

// checkReviewInvoke fails t when the call with the one-pass readers
// comes to anything else than main's.
func checkReviewInvoke(t testing.TB, c *Capability, got *reviewIn, args string) {
	t.Helper()
	fast, slow := invokeFast(c, got, args), invokeSlow(c, args)
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("arguments %q:\n one pass %+v\n     main %+v", args, fast, slow)
	}
}

// reviewOddArguments are the spellings the review asked about: duplicate
// keys (first or last wins), keys in another case or escaped, escapes and
// surrogates, invalid UTF-8, U+0000, numbers of every spelling, spacing
// and trailing data, deep nesting, long strings, null, not an object.
var reviewOddArguments = []string{
	// Plain, as agents send them.
	`{"text":"client 3 call 7"}`, `{ "text" : "s" , "n" : 3 , "flag" : true }`, `{"text":"s","x":1.5,"p":"q","pi":-7,"big":123456789012345678}`,
	// Duplicate keys: the validator sees both, the decoder keeps the last.
	`{"text":"a","text":"b"}`, `{"text":"a","text":1}`, `{"text":1,"text":"a"}`, `{"text":"a","n":1,"n":"x"}`, `{"text":"a","n":"x","n":1}`,
	`{"text":"a","n":1,"n":2.5}`, `{"text":"a","pi":1,"pi":null}`, `{"text":"a","p":null,"p":"b"}`, `{"text":"a","flag":true,"flag":false}`,
	// Keys that differ in case only, or are escaped, or fold in Unicode.
	`{"TEXT":"a"}`, `{"Text":"a"}`, `{"text":"a","TEXT":"b"}`, `{"TEXT":"b","text":"a"}`, `{"text":"a","N":5}`, `{"text":"a","Flag":true}`,
	`{"\u0074ext":"a"}`, `{"te\u0078t":"a"}`, `{"text":"a","\u006e":5}`, `{"text":"a","\u004e":5}`, `{"text":"a","ﬂag":true}`,
	`{"text":"a","\u212aey":1}`, `{"teſt":"a"}`, `{"text":"a","p\u0000":"x"}`,
	// String escapes, surrogates, invalid UTF-8.
	`{"text":"a\"b\\c\/d\b\f\n\r\t"}`, `{"text":"\u00e9"}`, `{"text":"é"}`, `{"text":"\ud83d\ude00"}`, `{"text":"\ud83d"}`, `{"text":"\ude00\ud83d"}`,
	`{"text":"\ud83dx"}`, `{"text":"\uDFFF"}`, "{\"text\":\"\xff\xfe\"}", "{\"text\":\"\xed\xa0\x80\"}", "{\"text\":\"\xc0\xaf\"}", "{\"text\":\"a\x7fb\"}",
	"{\"text\":\"ctl\x01\"}", "{\"text\":\"tab\tin\"}", `{"text":"bad \x"}`, `{"text":"\u12"}`, `{"text":"\u12G4"}`, `{"text":"<&>\u2028"}`,
	// U+0000: refused in any argument, on every path.
	`{"text":"\u0000"}`, `{"text":"a\u0000b"}`, `{"text":"a","p":"\u0000"}`, `{"text":"\\u0000"}`, `{"text":"a","\u0000":1}`,
	`{"text":"a","other":"\u0000"}`, "{\"text\":\"\x00\"}", `{"text":"\\\u0000"}`,
	// Numbers.
	`{"text":"a","n":1e2}`, `{"text":"a","n":1E2}`, `{"text":"a","n":1.0}`, `{"text":"a","n":1.5}`, `{"text":"a","n":-0}`, `{"text":"a","n":-0.0}`,
	`{"text":"a","n":01}`, `{"text":"a","n":+1}`, `{"text":"a","n":.5}`, `{"text":"a","n":1.}`, `{"text":"a","n":-}`, `{"text":"a","n":0x10}`,
	`{"text":"a","n":9223372036854775807}`, `{"text":"a","n":9223372036854775808}`, `{"text":"a","n":-9223372036854775808}`,
	`{"text":"a","big":999999999999999999}`, `{"text":"a","big":1000000000000000000}`, `{"text":"a","n":1e400}`, `{"text":"a","f":1e400}`,
	`{"text":"a","f":1e-400}`, `{"text":"a","f":-0}`, `{"text":"a","x":1e308}`, `{"text":"a","x":` + strings.Repeat("9", 299) + `}`,
	`{"text":"a","x":` + strings.Repeat("9", 310) + `}`, `{"text":"a","x":0.` + strings.Repeat("0", 400) + `1}`,
	`{"text":"a","n":1.0000000000000000001}`, `{"text":"a","n":` + strings.Repeat("1", 30) + `}`, `{"text":"a","n":"1"}`, `{"text":"a","f":NaN}`,
	`{"text":"a","f":Infinity}`, `{"text":"a","n":true}`,
	// Spacing, trailing data, not an object.
	" \t\r\n{\"text\":\"a\"}\n", `{"text":"a"}x`, `{"text":"a"}}`, `{"text":"a"} {}`, `{"text":"a",}`, `{,"text":"a"}`, `{"text" "a"}`,
	"{\"text\":\"a\"}\u00a0", "\ufeff{\"text\":\"a\"}", `{"text":"a"`, `{`, ``, ` `, `null`, ` null `, `[]`, `[{"text":"a"}]`, `"text"`, `1`, `true`,
	// Null for a field, nested values, deep nesting, long strings.
	`{"text":null}`, `{"text":"a","n":null}`, `{"text":"a","x":null}`, `{"text":"a","p":null}`, `{"text":"a","other":null}`,
	`{"text":"a","other":{"b":[1,2]}}`, `{"text":{"a":1}}`, `{"text":["a"]}`,
	`{"text":"a","other":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`{"text":"a","other":` + strings.Repeat(`{"a":`, 300) + `1` + strings.Repeat("}", 300) + `}`,
	`{"text":"` + strings.Repeat("long ", 20000) + `"}`, `{"text":"` + strings.Repeat(`\"`, 5000) + `"}`,
	// Extra members.
	`{"text":"a","other":1}`, `{"text":"a","":1}`, `{}`, `{"n":1}`,
}

// TestReviewOddArgumentsInvokeAsOnMain: every odd spelling is validated
// and decoded by the one-pass readers as main validated and decoded it:
// the same verdict, the same message, the same input to the handler.
func TestReviewOddArgumentsInvokeAsOnMain(t *testing.T) {
	var got reviewIn
	c := reviewCapability(t, &got)
	for _, args := range reviewOddArguments {
		checkReviewInvoke(t, c, &got, args)
	}
	// The comparison reaches the seam under review: these take validRaw
	// and the one-pass decoding, not the decoding path.
	for _, args := range []string{`{"text":"a","text":"b"}`, "{\"text\":\"\xff\xfe\"}", `{"text":"a","n":-0}`, `{"text":"a","n":1.0}`, " {\"text\":\"a\"}\n"} {
		if !c.flat.validRaw([]byte(args)) {
			t.Errorf("validRaw does not pass %q: the comparison misses it", args)
		}
	}
	// And the test can fail: the plain arguments reach the handler.
	if r := invokeFast(c, &got, `{"text":"s","n":3}`); r.Code != "" || r.In.Text != "s" || r.In.N != 3 {
		t.Fatalf("plain arguments: %+v", r)
	}
	if r := invokeFast(c, &got, `{"text":"\u0000"}`); r.Code != CodeInvalidInput || !strings.Contains(r.Message, "U+0000") {
		t.Fatalf("U+0000 is not refused: %+v", r)
	}
}

// addReviewSeeds adds the odd arguments (but the longest) to a fuzz
// target's seeds: FuzzValidRaw's, FuzzFlatDecoder's and FuzzReviewInvoke's.
func addReviewSeeds(f *testing.F) {
	for _, args := range reviewOddArguments {
		if len(args) < 1000 {
			f.Add(args)
		}
	}
}

// FuzzReviewInvoke: whatever the arguments, the one-pass check and decode
// come to what main's did.
func FuzzReviewInvoke(f *testing.F) {
	addReviewSeeds(f)
	var got reviewIn
	c := reviewCapability(f, &got)
	f.Fuzz(func(t *testing.T, args string) { checkReviewInvoke(t, c, &got, args) })
}

// numberIn has a json.Number field: encoding/json refuses a string that
// is not a number literal for it (and reads a number into it), though its
// kind is string.
type numberIn struct {
	Text string       `json:"text"`
	N    json.Number  `json:"n,omitempty"`
	P    *json.Number `json:"p,omitempty"`
}

// TestReviewJSONNumberFieldDecodedAsUnmarshal: a json.Number field is
// decoded as json.Unmarshal decodes it, whatever the string; and a call
// of a Define capability with such a field comes to what main's did (its
// schema says string, so "abc" passes the check; json.Unmarshal then
// refuses it, and so must the one-pass decoding).
func TestReviewJSONNumberFieldDecodedAsUnmarshal(t *testing.T) {
	d := compileFlatDecoder(reflect.TypeFor[numberIn]())
	for _, args := range []string{`{"text":"s","n":"abc"}`, `{"text":"s","p":"abc"}`, `{"text":"s","n":"12"}`, `{"text":"s","n":"-0"}`,
		`{"text":"s","n":"1e2"}`, `{"text":"s","n":" 1"}`, `{"text":"s","n":""}`, `{"text":"s","n":"01"}`, `{"text":"s","n":12}`} {
		if d != nil {
			checkFlatDecode[numberIn](t, d, args)
		}
	}
	var got numberIn
	c := Define(Spec[numberIn, Result]{Name: "number", Domain: "test", Description: "d", Annotations: &Annotations{ReadOnly: true},
		Handler: func(_ context.Context, _ *Call, in numberIn) (Result, error) {
			got = in
			return Result{}, nil
		}})
	if err := c.validate(builtin, capabilityName); err != nil {
		t.Fatal(err)
	}
	checked, err := c.validateInput(json.RawMessage(`{"text":"s","n":"abc"}`))
	if err == nil {
		_, err = c.Handler(context.Background(), &Call{}, checked)
	}
	if CodeOf(err) != CodeInvalidInput {
		t.Fatalf(`n "abc": the handler got %+v (err %v); json.Unmarshal refuses it: want %s`, got, err, CodeInvalidInput)
	}
}
