package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/enclave-mcp/enclave/codemode/sandbox"
)

// weatherHost is a Host with one capability, "weather".
type weatherHost struct{}

func (weatherHost) Call(_ context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	var a struct{ City string }
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, &sandbox.HostError{Code: "invalid", Message: "args must be {city}"}
	}
	if a.City != "Paris" {
		return nil, &sandbox.HostError{Code: "not_found", Message: "no weather for " + a.City}
	}
	return json.RawMessage(`{"celsius":21}`), nil
}

func (weatherHost) Fetch(context.Context, json.RawMessage) (json.RawMessage, error) {
	return nil, &sandbox.HostError{Code: "forbidden", Message: "no network"}
}

func (weatherHost) Storage(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return nil, &sandbox.HostError{Code: "forbidden", Message: "no storage"}
}

func ExampleRun() {
	out, err := sandbox.Run(context.Background(), sandbox.Program{
		Code: `
			const paris = await codemode.weather({city: "Paris"});
			let oslo;
			try {
				oslo = await codemode.weather({city: "Oslo"});
			} catch (e) {
				console.warn(e.code, e.message);
			}
			return {paris: paris.celsius, oslo: oslo ?? null};`,
		Capabilities: []string{"weather"},
		Host:         weatherHost{},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out.Result), out.HostCalls, out.Err == nil)
	for _, l := range out.Logs {
		fmt.Println(l.Level, l.Message)
	}
	// Output:
	// {"paris":21,"oslo":null} 2 true
	// warn not_found no weather for Oslo
}
