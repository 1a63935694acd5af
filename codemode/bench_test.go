package codemode_test

import (
	"syscall"
	"testing"

	"github.com/enclave-mcp/enclave/enclavetest"
)

// BenchmarkExecute is a trivial execute, and one that calls a capability,
// through the real MCP path of a whole server on SQLite (the client in the
// same process), one call at a time. cpu-ns/op is the process's CPU time
// per call, client included: steadier than wall time on a shared machine.
// The bench command (go run ./bench) measures the server alone under load.
func BenchmarkExecute(b *testing.B) {
	s := enclavetest.Start(b, enclavetest.Options{})
	c := s.CreateUser(b, "bench").MCP(b)
	for _, bench := range []struct{ name, code, want string }{
		{"trivial", `return 1+1`, `2`},
		{"whoami", `return (await codemode.whoami({})).username`, `"bench"`},
	} {
		b.Run(bench.name, func(b *testing.B) {
			start := cpuTime()
			for b.Loop() {
				res, err := c.Call("execute", map[string]any{"code": bench.code})
				if err != nil || res.IsError {
					b.Fatalf("%v %s", err, res.Text)
				}
				var o out
				if err := res.Decode(&o); err != nil || string(o.Result) != bench.want {
					b.Fatalf("%v %s", err, res.Text)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
