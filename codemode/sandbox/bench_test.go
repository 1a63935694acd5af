package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"modernc.org/libc"
	lib "modernc.org/libquickjs"
	"modernc.org/quickjs"
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

// BenchmarkRunStages splits the cost of a trivial run, as the package doc
// reports it: a runtime alone, a context on a runtime kept, a VM, a VM
// with the prelude loaded, then called, and a whole Run. Each reports the
// process's CPU time per run (cpu-ns/op), steadier than wall time on a
// machine shared with other work.
func BenchmarkRunStages(b *testing.B) {
	bytecode, err := preludeBytecode()
	if err != nil {
		b.Fatal(err)
	}
	config := newRun(Program{Code: `return 1+1`, Host: nopHost{}}).preludeConfig()
	bridge := func([]any) (any, error) { return nil, nil }
	b.Run("runtime", func(b *testing.B) {
		tls := libc.NewTLS()
		defer tls.Close()
		defer cpuPerOp(b)()
		for b.Loop() {
			lib.XJS_FreeRuntime(tls, lib.XJS_NewRuntime(tls))
		}
	})
	b.Run("context", func(b *testing.B) {
		tls := libc.NewTLS()
		defer tls.Close()
		rt := lib.XJS_NewRuntime(tls)
		defer lib.XJS_FreeRuntime(tls, rt)
		defer cpuPerOp(b)()
		for b.Loop() {
			lib.XJS_FreeContext(tls, lib.XJS_NewContext(tls, rt))
		}
	})
	stage := func(name string, load, call bool) {
		b.Run(name, func(b *testing.B) {
			defer cpuPerOp(b)()
			for b.Loop() {
				vm, err := quickjs.NewVM()
				if err != nil {
					b.Fatal(err)
				}
				if err := vm.RegisterHostFunc(bridgeName, bridge); err != nil {
					b.Fatal(err)
				}
				if load {
					prelude, err := vm.EvalBytecodeValue(bytecode)
					if err != nil {
						b.Fatal(err)
					}
					if call {
						run, err := prelude.CallValue(quickjs.UndefinedValue, config)
						if err != nil {
							b.Fatal(err)
						}
						run.Free()
					}
					prelude.Free()
				}
				vm.Close()
			}
		})
	}
	stage("vm", false, false)
	stage("vm+prelude", true, false)
	stage("vm+prelude+call", true, true)
	b.Run("run", func(b *testing.B) {
		p := Program{Code: `return 1+1`, Host: nopHost{}}
		defer cpuPerOp(b)()
		for b.Loop() {
			if out, err := Run(context.Background(), p); err != nil || out.Err != nil {
				b.Fatal(err, out.Err)
			}
		}
	})
}

// cpuPerOp starts counting the process's CPU time; the function it returns
// reports it per op.
func cpuPerOp(b *testing.B) func() {
	start := processCPU()
	return func() { b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op") }
}

func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
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

// BenchmarkRunBindings is a trivial run with 1 and with 50 capabilities
// bound, in CPU time per run: what binding a capability costs a run that
// does not call it.
func BenchmarkRunBindings(b *testing.B) {
	for _, n := range []int{1, 50} {
		caps := []string{"nop"}
		for i := range n - 1 {
			caps = append(caps, fmt.Sprintf("service.method%d", i))
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := Program{Code: `return 1+1`, Capabilities: caps, Host: nopHost{}}
			defer cpuPerOp(b)()
			for b.Loop() {
				if out, err := Run(context.Background(), p); err != nil || out.Err != nil {
					b.Fatal(err, out.Err)
				}
			}
		})
	}
}
