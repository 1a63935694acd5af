package main

// Storage rows: tools/call storageGet and storageSet on (b) and (c), next
// to the same server's echo (a plain capability call through the same MCP
// path) measured in the same run.

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// The storage load modes.
const (
	modeStorageGet = "storage-get" // tools/call storageGet of the client's own key, the value checked
	modeStorageSet = "storage-set" // tools/call storageSet of one of 64 keys of the client, the revision checked
)

// storageBucket is the bucket every client writes in (each in its own
// user's, so the same id is as many buckets as clients).
const storageBucket = "bench"

// storageKeys are the storage rows: the server kind and the load mode.
var storageKeys = map[string]struct{ base, mode string }{
	"bsg": {"b", modeStorageGet},
	"bss": {"b", modeStorageSet},
	"csg": {"c", modeStorageGet},
	"css": {"c", modeStorageSet},
}

func init() {
	serverNames["bsg"] = "(b-sg) as (b), storageGet"
	serverNames["bss"] = "(b-ss) as (b), storageSet"
	serverNames["csg"] = "(c-sg) as (c), storageGet"
	serverNames["css"] = "(c-ss) as (c), storageSet"
}

// isStorage reports whether key is a storage row.
func isStorage(key string) bool { _, ok := storageKeys[key]; return ok }

// withStorage adds, after (b) and (c), their storage rows (unless listed
// already).
func withStorage(keys []string) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k)
		for _, x := range []string{k + "sg", k + "ss"} {
			if (k == "b" || k == "c") && !slices.Contains(keys, x) {
				out = append(out, x)
			}
		}
	}
	return out
}

// storageTool is the tool a storage mode calls.
func storageTool(mode string) string {
	if mode == modeStorageGet {
		return "storageGet"
	}
	return "storageSet"
}

// storageValue is what client n stores (and reads back in get mode).
func storageValue(n, call int) string {
	return fmt.Sprintf(`{"client":%d,"call":%d,"text":"a short value of the bench"}`, n, call)
}

func storageSetBody(id int, key, value string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"storageSet","arguments":{"storageId":%q,"key":%q,"value":%s}}}`,
		id, storageBucket, key, value)
}

// storageRequest is one tools/call of a storage mode, with its check.
func (c *client) storageRequest(id int) ([]byte, func(json.RawMessage) error) {
	if c.mode == modeStorageSet {
		return storageSetBody(id, fmt.Sprintf("k%d/%d", c.n, id%64), storageValue(c.n, id)), checkStored
	}
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"storageGet","arguments":{"storageId":%q,"key":%q}}}`,
		id, storageBucket, fmt.Sprintf("k%d", c.n))
	want := storageValue(c.n, 0)
	return body, func(raw json.RawMessage) error { return checkRead(raw, want) }
}

// structured is a tools/call answer's structured content, or the error.
func structured(raw json.RawMessage) (json.RawMessage, error) {
	var m toolAnswer
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m.Result == nil || m.Result.IsError || len(m.Result.Structured) == 0 {
		return nil, fmt.Errorf("error: %.300s", raw)
	}
	return m.Result.Structured, nil
}

func checkStored(raw json.RawMessage) error {
	s, err := structured(raw)
	if err != nil {
		return err
	}
	var out struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(s, &out); err != nil || out.Revision < 1 {
		return fmt.Errorf("not a stored revision: %.300s", raw)
	}
	return nil
}

func checkRead(raw json.RawMessage, want string) error {
	s, err := structured(raw)
	if err != nil {
		return err
	}
	var out struct {
		Found bool            `json:"found"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(s, &out); err != nil || !out.Found {
		return fmt.Errorf("not found: %.300s", raw)
	}
	var got, exp any
	_ = json.Unmarshal(out.Value, &got)
	_ = json.Unmarshal([]byte(want), &exp)
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		return fmt.Errorf("value %s, want %s", out.Value, want)
	}
	return nil
}

// printStorage prints the storage rows of one concurrency level and their
// ratios to the same server's echo.
func printStorage(w io.Writer, rep Report, clients int, servers []ServerResult) {
	byKey := map[string]ServerResult{}
	var rows []ServerResult
	for _, s := range servers {
		if s.Skipped == "" {
			byKey[s.Key] = s
		}
		if isStorage(s.Key) {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Storage buckets: MCP tools/call storageGet / storageSet, %d clients, %s measured per server and round\n\n", clients, rep.Flags["storage_duration"])
	fmt.Fprintf(w, "each client its own user and key (%d-byte value); storageSet cycles over 64 keys; the plain capability call is the same server's echo, same run\n\n", len(storageValue(0, 0)))
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| server\t req/s\t p50 ms\t p99 ms\t errors\t server CPU-s/1k calls\t throughput ×echo\t p50 ×echo\t p99 ×echo\t CPU per call ×echo\t throughput ×(f)\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	f, okF := floorOf(servers)
	ratio := func(ok bool, x, y float64) string {
		if !ok || y == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", x/y)
	}
	for _, s := range rows {
		if s.Skipped != "" {
			fmt.Fprintf(tw, "| %s\t skipped: %s\t\t\t\t\t\t\t\t\t\t\n", s.Name, s.Skipped)
			continue
		}
		e, okE := byKey[storageKeys[s.Key].base]
		fmt.Fprintf(tw, "| %s\t %.0f\t %.2f\t %.2f\t %d\t %.3f\t %s\t %s\t %s\t %s\t %s\t\n", s.Name, s.Load.RPS, s.Load.P50ms, s.Load.P99ms, s.Load.Errors, s.CPUPer1k,
			ratio(okE, s.Load.RPS, e.Load.RPS), ratio(okE, s.Load.P50ms, e.Load.P50ms), ratio(okE, s.Load.P99ms, e.Load.P99ms), ratio(okE, s.CPUPer1k, e.CPUPer1k),
			ratio(okF, s.Load.RPS, f.Load.RPS))
	}
	tw.Flush()
}
