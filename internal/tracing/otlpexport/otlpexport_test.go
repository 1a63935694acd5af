package otlpexport

import "testing"

func TestEndpoint(t *testing.T) {
	for _, ok := range []string{"http://localhost:4318", "https://collector.example.com", "http://c:4318/custom/traces/"} {
		if err := CheckEndpoint(ok); err != nil {
			t.Errorf("CheckEndpoint(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "localhost:4318", "grpc://c:4317", "http://", "http://u:p@c:4318", "http://c:4318?x=1"} {
		if err := CheckEndpoint(bad); err == nil {
			t.Errorf("CheckEndpoint(%q) accepted", bad)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	h, err := ParseHeaders(" x-api-key = abc%3D ,b=2,")
	if err != nil || len(h) != 2 || h["x-api-key"] != "abc=" || h["b"] != "2" {
		t.Fatalf("ParseHeaders = %v, %v", h, err)
	}
	if _, err := ParseHeaders("novalue"); err == nil {
		t.Error("a pair without = accepted")
	}
	if h, err := ParseHeaders(""); err != nil || len(h) != 0 {
		t.Errorf("empty = %v, %v", h, err)
	}
}
