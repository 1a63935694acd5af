package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

type nopHost struct{}

func (nopHost) Call(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}
func (nopHost) Fetch(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }
func (nopHost) Storage(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return nil, nil
}

func benchmarkRun(b *testing.B, p Program, want string) {
	b.ReportAllocs()
	for b.Loop() {
		out, err := Run(context.Background(), p)
		if err != nil || out.Err != nil || string(out.Result) != want {
			b.Fatalf("%s %v %+v", out.Result, err, out.Err)
		}
	}
}

func BenchmarkRunTrivial(b *testing.B) {
	benchmarkRun(b, Program{Code: `return 1+1`, Host: nopHost{}}, `2`)
}

func BenchmarkRunHostCall(b *testing.B) {
	benchmarkRun(b, Program{Code: `return await codemode.nop({})`, Capabilities: []string{"nop"}, Host: nopHost{}}, `{}`)
}

// BenchmarkRunCapabilities is a host call with 50 capabilities bound, each
// a function the prelude makes in every run.
func BenchmarkRunCapabilities(b *testing.B) {
	caps := []string{"nop"}
	for i := range 49 {
		caps = append(caps, fmt.Sprintf("service.method%d", i))
	}
	benchmarkRun(b, Program{Code: `return await codemode.nop({})`, Capabilities: caps, Host: nopHost{}}, `{}`)
}

// BenchmarkRunImport is a program with a static import, which runs as a
// module rather than a script.
func BenchmarkRunImport(b *testing.B) {
	benchmarkRun(b, Program{Code: `import { twice } from "util"; return twice(1)`, Resolver: newResolver(), Host: nopHost{}}, `2`)
}

// BenchmarkHostCalls is the cost of one more host call inside a run.
func BenchmarkHostCalls(b *testing.B) {
	b.ReportAllocs()
	p := Program{
		Code:         `for (let i = 0; i < 1000; i++) await codemode.nop({i}); return 1`,
		Capabilities: []string{"nop"},
		Host:         nopHost{},
	}
	for b.Loop() {
		if out, _ := Run(context.Background(), p); out.Err != nil {
			b.Fatal(out.Err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/call")
}

// BenchmarkMemoryBombs reports how the Go heap and the RSS grow over memory
// bombs of 16 MiB each (see TestMemoryHygiene).
func BenchmarkMemoryBombs(b *testing.B) {
	p := Program{Host: nopHost{}, Limits: Limits{Memory: 16 << 20, Timeout: time.Minute}}
	heap0, rss0 := memory()
	i := 0
	for b.Loop() {
		p.Code = bombs[i%len(bombs)]
		i++
		if out, _ := Run(context.Background(), p); out.Err == nil || out.Err.Limit != LimitMemory {
			b.Fatalf("%+v", out.Err)
		}
	}
	b.StopTimer()
	heap1, rss1 := memory()
	b.ReportMetric(float64(int64(heap1)-int64(heap0))/(1<<20), "heap-MiB-grown")
	b.ReportMetric(float64(int64(rss1)-int64(rss0))/(1<<20), "rss-MiB-grown")
}
