package metrics

import "testing"

func TestMetricsAddrOnEveryInterface(t *testing.T) {
	for addr, want := range map[string]bool{
		":9090": true, "0.0.0.0:9090": true, "[::]:9090": true,
		"127.0.0.1:9090": false, "[::1]:9090": false, "10.0.0.5:9090": false, "metrics.internal:9090": false,
	} {
		if got := OnEveryInterface(addr); got != want {
			t.Errorf("OnEveryInterface(%q) = %v, want %v", addr, got, want)
		}
	}
}
