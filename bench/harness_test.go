package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests check the harness's arithmetic and guards; they start no
// server and time nothing.

func TestPercentiles(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 1000; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.50, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {0.999, 999 * time.Millisecond}, {1, time.Second}} {
		if got := pct(lat, c.p); got != c.want {
			t.Errorf("pct(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := pct(nil, 0.5); got != 0 {
		t.Errorf("pct of nothing = %v", got)
	}
}

func TestLoadRefusesNonLoopback(t *testing.T) {
	for _, u := range []string{"http://10.0.0.1:8080/mcp", "http://192.168.1.2/mcp", "https://example.com/mcp"} {
		err := loadMain([]string{"-url", u, "-clients", "1", "-duration", "1ms", "-warmup", "0s"})
		if err == nil || !strings.Contains(err.Error(), "loopback only") {
			t.Errorf("load %s: %v, want a loopback-only refusal", u, err)
		}
	}
}

func TestProcReadings(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	cpu, err := cpuSeconds(os.Getpid())
	if err != nil || cpu < 0 {
		t.Fatalf("cpuSeconds: %v, %v", cpu, err)
	}
	hwm, err := statusKiB(strconv.Itoa(os.Getpid()), "VmHWM")
	if err != nil || hwm <= 0 {
		t.Fatalf("VmHWM: %v, %v", hwm, err)
	}
}
