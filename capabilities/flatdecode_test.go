package capabilities

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

type stateName string

type wideIn struct {
	Text   string    `json:"text"`
	N      int       `json:"n,omitempty"`
	Small  int8      `json:"small"`
	Count  uint16    `json:"count"`
	Big    uint64    `json:"big"`
	X      *float64  `json:"x,omitempty"`
	F      float64   `json:"f"`
	Flag   bool      `json:"flag"`
	P      *string   `json:"p"`
	PB     *bool     `json:"pb"`
	PI     *int      `json:"pi"`
	State  stateName `json:"state"`
	Plain  string
	hidden string
}

// checkFlatDecode fails t when the one-pass decoding of args into a T
// differs from json.Unmarshal's; it reports whether it decoded them.
func checkFlatDecode[T any](t testing.TB, d *flatDecoder, args string) bool {
	t.Helper()
	var got T
	if !d.decode([]byte(args), reflect.ValueOf(&got).Elem()) {
		return false
	}
	var want T
	if err := json.Unmarshal([]byte(args), &want); err != nil {
		t.Fatalf("decoded %s, which json.Unmarshal refuses: %v", args, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", args, got, want)
	}
	return true
}

// TestFlatDecoderMatchesUnmarshal: over generated arguments (keys of
// every case, unknown, repeated; values of every kind, spelling and
// range; broken syntax), what the one-pass decoding decodes is what
// json.Unmarshal decodes.
func TestFlatDecoderMatchesUnmarshal(t *testing.T) {
	d := compileFlatDecoder(reflect.TypeFor[wideIn]())
	if d == nil {
		t.Fatal("a struct of primitives is not compiled")
	}
	keys := []string{"text", "n", "small", "count", "big", "x", "f", "flag", "p", "pb", "pi", "state", "Plain", "plain", "TEXT", "Flag", "hidden", "other", "te\\u0078t", "é"}
	values := []string{`"s"`, `""`, `"a b"`, `"a\"b"`, `"\u00e9"`, `"é"`, "\"\x7f\"", `"\ud800"`,
		`0`, `1`, `-1`, `-0`, `127`, `128`, `-129`, `65535`, `65536`, `123456789012345678`, `1234567890123456789`, `18446744073709551615`,
		`1.5`, `-2.0`, `0.1`, `1e3`, `01`, `-`, `true`, `false`, `null`, `[]`, `{}`, `{"a":1}`, `tru`}
	spaces := []string{"", " ", "\n\t"}
	rng := rand.New(rand.NewPCG(7, 8))
	sp := func() string { return spaces[rng.IntN(len(spaces))] }
	decoded := 0
	for range 50000 {
		var b strings.Builder
		b.WriteString(sp() + "{" + sp())
		for i := range rng.IntN(5) {
			if i > 0 {
				b.WriteString("," + sp())
			}
			b.WriteString(`"` + keys[rng.IntN(len(keys))] + `"` + sp() + ":" + sp() + values[rng.IntN(len(values))] + sp())
		}
		b.WriteString("}" + sp())
		args := b.String()
		switch rng.IntN(20) {
		case 0:
			args = args[:rng.IntN(len(args)+1)]
		case 1:
			args += "x"
		case 2:
			args = values[rng.IntN(len(values))]
		}
		if checkFlatDecode[wideIn](t, d, args) {
			decoded++
		}
	}
	if decoded < 5000 {
		t.Errorf("only %d generated arguments were decoded in one pass", decoded)
	}
	for _, args := range []string{`{"text":"client 3 call 7"}`, `{"text":"s","n":-3,"x":1.25,"flag":true,"p":"q","pi":7,"state":"open","big":18}`, `{}`} {
		if !checkFlatDecode[wideIn](t, d, args) {
			t.Errorf("not decoded in one pass: %s", args)
		}
	}
}

type unmarshalsItself struct{ V string }

func (u *unmarshalsItself) UnmarshalJSON([]byte) error { u.V = "mine"; return nil }

// TestFlatDecoderCompiles: only plain structs are compiled.
func TestFlatDecoderCompiles(t *testing.T) {
	type embedded struct{ A string }
	for _, typ := range []reflect.Type{
		reflect.TypeFor[string](),
		reflect.TypeFor[map[string]any](),
		reflect.TypeFor[json.RawMessage](),
		reflect.TypeFor[struct{ embedded }](),
		reflect.TypeFor[struct {
			N int `json:"n,string"`
		}](),
		reflect.TypeFor[struct {
			N int `json:"-"`
		}](),
		reflect.TypeFor[struct {
			L []string `json:"l"`
		}](),
		reflect.TypeFor[struct {
			F float32 `json:"f"`
		}](),
		reflect.TypeFor[struct {
			U unmarshalsItself `json:"u"`
		}](),
		reflect.TypeFor[struct {
			T time.Time `json:"t"`
		}](),
		reflect.TypeFor[struct {
			A string `json:"a"`
			B string `json:"A"`
		}](),
		reflect.TypeFor[unmarshalsItself](),
	} {
		if compileFlatDecoder(typ) != nil {
			t.Errorf("%v compiled", typ)
		}
	}
	if compileFlatDecoder(reflect.TypeFor[struct{}]()) == nil {
		t.Error("an empty struct is not compiled")
	}
}

// FuzzFlatDecoder: whatever the arguments, the one-pass decoding agrees
// with json.Unmarshal.
func FuzzFlatDecoder(f *testing.F) {
	d := compileFlatDecoder(reflect.TypeFor[wideIn]())
	for _, s := range []string{`{"text":"s","n":1}`, `{"small":200}`, `{"count":-0}`, `{"x":1.5,"pi":3,"p":"a"}`, `{"TEXT":"s"}`, `{"text":"s","text":"t"}`} {
		f.Add(s)
	}
	addReviewSeeds(f) // the review's odd spellings (review_perf_test.go)
	f.Fuzz(func(t *testing.T, args string) { checkFlatDecode[wideIn](t, d, args) })
}
