package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// protocolVersion is the MCP version the clients negotiate: one with
// sessions, served by all four servers.
const protocolVersion = "2025-06-18"

// LoadResult is what the load generator prints as its last line.
type LoadResult struct {
	Clients   int      `json:"clients"`
	Rate      float64  `json:"rate,omitempty"` // offered calls/s; 0 is closed loop
	Seconds   float64  `json:"seconds"`
	Requests  int64    `json:"requests"`
	Errors    int64    `json:"errors"`
	RPS       float64  `json:"rps"`
	P50ms     float64  `json:"p50_ms"`
	P99ms     float64  `json:"p99_ms"`
	P999ms    float64  `json:"p999_ms"`
	MaxMs     float64  `json:"max_ms"`
	ErrSample []string `json:"error_sample,omitempty"`
}

// loadMain runs N clients, each with its own token (when given), its own
// connection and its own MCP session, calling tools/call echo (or, with
// -mode, code mode's execute) in a closed loop: warm-up, then the measured
// window. It prints "MEASURE_START" and "MEASURE_END" when the window opens
// and closes (the orchestrator samples the server's CPU time then), and the
// result as a JSON line. -mode bomb runs a fixed number of memory bombs
// instead (runBombs).
func loadMain(args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	target := fs.String("url", "", "MCP endpoint, http://127.0.0.1:PORT/mcp; several, comma-separated, are replicas the clients are spread over")
	tokensFile := fs.String("tokens", "", "file of bearer tokens, one a line; client i uses line i (none: no Authorization header)")
	clients := fs.Int("clients", 16, "concurrent clients")
	warmup := fs.Duration("warmup", 3*time.Second, "unmeasured warm-up")
	duration := fs.Duration("duration", 15*time.Second, "measured window")
	rate := fs.Float64("rate", 0, "total calls per second, spread evenly over the clients (0: each client calls again as soon as it has its answer)")
	mode := fs.String("mode", modeEcho, "what the clients call: echo, exec (execute `return 1+1`), exec-echo (execute calling echo once), storage-get (storageGet of the client's key), storage-set (storageSet of one of 64 keys) or bomb (execute -code, -calls times in all; -duration bounds it)")
	calls := fs.Int("calls", 1000, "bomb: executes in all, over the clients")
	code := fs.String("code", codeBomb, "bomb: the program")
	settle := fs.Duration("settle", 2*time.Second, "bomb: pause before and after the bombs, for the server's RSS readings")
	warm := fs.Int("warm", 3, "bomb: trivial executes per client before the first reading")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch *mode {
	case modeEcho, modeExec, modeExecEcho, modeBomb, modeStorageGet, modeStorageSet:
	default:
		return fmt.Errorf("unknown -mode %q", *mode)
	}
	targets := strings.Split(*target, ",") // replicas: client i calls targets[i % n]
	for _, t := range targets {
		if !strings.HasPrefix(t, "http://127.") && !strings.HasPrefix(t, "http://localhost") {
			return fmt.Errorf("refusing to load %q: loopback only", t)
		}
	}
	var tokens []string
	if *tokensFile != "" {
		b, err := os.ReadFile(*tokensFile)
		if err != nil {
			return err
		}
		tokens = strings.Fields(string(b))
		if len(tokens) < *clients {
			return fmt.Errorf("%d tokens for %d clients: each client needs its own user", len(tokens), *clients)
		}
	}
	// Bounded in time whatever happens: warm-up + window + setup slack.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *warmup+*duration+2**settle+60*time.Second)
	defer cancel()

	cs := make([]*client, *clients)
	for i := range cs {
		c := &client{url: targets[i%len(targets)], n: i, mode: *mode, code: *code, http: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true},
		}}
		if tokens != nil {
			c.token = tokens[i]
		}
		if err := c.initialize(ctx); err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		cs[i] = c
	}
	if *mode == modeBomb {
		return runBombs(ctx, cs, *calls, *warm, *settle, *duration)
	}
	start := time.Now()
	measureFrom := start.Add(*warmup)
	measureTo := measureFrom.Add(*duration)
	var wg sync.WaitGroup
	for _, c := range cs {
		if *rate > 0 {
			c.every = time.Duration(float64(time.Second) * float64(*clients) / *rate)
			c.next = start.Add(time.Duration(c.n) * c.every / time.Duration(*clients))
		}
		wg.Go(func() { c.run(ctx, measureFrom, measureTo) })
	}
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sleep(time.Until(measureFrom)); err != nil {
		return err
	}
	fmt.Println("MEASURE_START")
	if err := sleep(time.Until(measureTo)); err != nil {
		return err
	}
	fmt.Println("MEASURE_END")
	wg.Wait()
	for _, c := range cs {
		c.close()
	}

	var res LoadResult
	var lat []time.Duration
	for _, c := range cs {
		res.Requests += int64(len(c.lat))
		res.Errors += c.errors
		lat = append(lat, c.lat...)
		for _, e := range c.errSample {
			if len(res.ErrSample) < 5 {
				res.ErrSample = append(res.ErrSample, e)
			}
		}
	}
	slices.Sort(lat)
	res.Clients = *clients
	res.Rate = *rate
	res.Seconds = duration.Seconds()
	res.RPS = float64(res.Requests) / res.Seconds
	res.P50ms, res.P99ms, res.P999ms = ms(pct(lat, 0.50)), ms(pct(lat, 0.99)), ms(pct(lat, 0.999))
	if len(lat) > 0 {
		res.MaxMs = ms(lat[len(lat)-1])
	}
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
	return nil
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type client struct {
	url, token, session string
	mode, code          string // what it calls (modeEcho…); the bomb's program
	n                   int
	http                *http.Client
	id                  int
	every               time.Duration // paced: one call per every, from next
	next                time.Time
	lat                 []time.Duration // successful calls completed in the window
	errors              int64           // failed calls completed in the window
	errSample           []string
}

func (c *client) header(req *http.Request) {
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", protocolVersion)
	}
}

// post sends one JSON-RPC message and returns the response to id (nil for
// a notification).
func (c *client) post(ctx context.Context, body []byte, id int) (*http.Response, json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	c.header(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if id == 0 {
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode/100 != 2 {
			return resp, nil, fmt.Errorf("status %d", resp.StatusCode)
		}
		return resp, nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp, nil, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok {
				continue
			}
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			raw := json.RawMessage(strings.TrimSpace(data))
			if json.Unmarshal(raw, &m) == nil && string(m.ID) == fmt.Sprint(id) {
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp, raw, nil
			}
		}
		return resp, nil, errors.New("event stream ended without the response")
	}
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func (c *client) initialize(ctx context.Context) error {
	c.id++
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"enclave-bench","version":"1"}}}`, c.id, protocolVersion)
	resp, raw, err := c.post(ctx, []byte(body), c.id)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	var m struct {
		Error *json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(raw, &m); err != nil || m.Error != nil {
		return fmt.Errorf("initialize: %s", raw)
	}
	c.session = resp.Header.Get("Mcp-Session-Id")
	if c.session == "" {
		return errors.New("initialize: no session id")
	}
	if _, _, err = c.post(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), 0); err != nil {
		return err
	}
	// Like an agent, list the tools before calling one: the servers then
	// keep the session's listed set, which tools/list_changed is judged by.
	c.id++
	_, raw, err = c.post(ctx, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, c.id), c.id)
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	tool := "echo"
	switch c.mode {
	case modeEcho, "":
	case modeStorageGet, modeStorageSet:
		tool = storageTool(c.mode)
	default:
		tool = "execute"
	}
	if !bytes.Contains(raw, []byte(`"name":"`+tool+`"`)) {
		return fmt.Errorf("tools/list has no %s: %.200s", tool, raw)
	}
	if c.mode == modeStorageGet {
		// The key every call of this client reads.
		c.id++
		_, raw, err := c.post(ctx, storageSetBody(c.id, fmt.Sprintf("k%d", c.n), storageValue(c.n, 0)), c.id)
		if err == nil {
			err = checkStored(raw)
		}
		if err != nil {
			return fmt.Errorf("storageSet before reading: %w", err)
		}
	}
	return nil
}

// call runs one tools/call of the client's mode (echo by default) and
// checks the answer.
func (c *client) call(ctx context.Context) error {
	c.id++
	body, check := c.request(c.id)
	_, raw, err := c.post(ctx, body, c.id)
	if err != nil {
		return err
	}
	return check(raw)
}

func (c *client) run(ctx context.Context, from, to time.Time) {
	c.lat = make([]time.Duration, 0, 1<<15)
	for ctx.Err() == nil {
		if c.every > 0 {
			// Paced: latency counts from the scheduled send time, so that a
			// slow answer also delays (and is charged to) the calls behind it.
			select {
			case <-time.After(time.Until(c.next)):
			case <-ctx.Done():
				return
			}
		}
		t0 := time.Now()
		if c.every > 0 {
			t0, c.next = c.next, c.next.Add(c.every)
		}
		if !t0.Before(to) {
			return
		}
		err := c.call(ctx)
		t1 := time.Now()
		if t1.Before(from) || t1.After(to) {
			continue // completed outside the window
		}
		if err != nil {
			c.errors++
			if len(c.errSample) < 2 {
				c.errSample = append(c.errSample, err.Error())
			}
			continue
		}
		c.lat = append(c.lat, t1.Sub(t0))
	}
}

// close ends the session (DELETE with the token, unlike mcp-go's client).
func (c *client) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.url, nil)
	if err == nil {
		c.header(req)
		if resp, err := c.http.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	c.http.CloseIdleConnections()
}
