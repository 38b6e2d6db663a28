package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/httpapi"
)

// loadResult is one load run against one endpoint.
type loadResult struct {
	requests int
	took     time.Duration
	p50, p99 time.Duration
	// cpu is the CPU time of this process (server and load generator) and
	// of Redis during the run.
	cpu cpuUse
}

func (r loadResult) rps() float64 { return float64(r.requests) / r.took.Seconds() }

// queryResult is the tenant query load: the real endpoint and the bare
// handler, one result per round each.
type queryResult struct {
	tenants    int
	real, bare []loadResult
}

// measureQuery fills Redis with a finished plan of n tenants, serves the real
// API (httpapi.New over the coordinator, behind httpapi.NewServer as
// cmd/deploycoord serves it) and the bare handler on two listeners, and
// loads GET /v1/tenants/{id}/task of random tenants on each in turn with
// -query-clients keep-alive clients for -query-duration, -rounds times.
func (e *env) measureQuery(ctx context.Context, n int) (queryResult, error) {
	res := queryResult{tenants: n}
	prefix := newPrefix("query")
	defer func() { _ = e.reset(context.Background(), prefix) }()
	in, err := e.newInstance(e.client, prefix)
	if err != nil {
		return res, err
	}
	defer in.shutdown()
	if _, err := runOn(ctx, in, 0, n, 1, e.cfg.Concurrency, nil); err != nil {
		return res, err
	}

	realURL, stopReal, err := serve(httpapi.New(in.coord, httpapi.Config{}))
	if err != nil {
		return res, err
	}
	defer stopReal()
	bareURL, stopBare, err := serve(bareHandler(e.client, prefix))
	if err != nil {
		return res, err
	}
	defer stopBare()

	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: e.cfg.QueryClients, MaxIdleConnsPerHost: e.cfg.QueryClients,
		MaxConnsPerHost: e.cfg.QueryClients, DisableCompression: true,
	}}
	defer client.CloseIdleConnections()
	for _, base := range []string{realURL, bareURL} {
		if err := checkAnswer(ctx, client, base, tenantID(n/3)); err != nil {
			return res, err
		}
	}
	for round := range e.cfg.Rounds {
		order := []string{realURL, bareURL}
		if round%2 == 1 {
			order = []string{bareURL, realURL}
		}
		for _, base := range order {
			// A short warm-up opens the connections.
			if _, err := load(ctx, client, base, n, e.cfg.QueryClients, e.cfg.QueryDuration/5); err != nil {
				return res, err
			}
			cpu0 := e.cpuNow(ctx)
			r, err := load(ctx, client, base, n, e.cfg.QueryClients, e.cfg.QueryDuration)
			if err != nil {
				return res, err
			}
			r.cpu = e.cpuNow(ctx).sub(cpu0)
			if base == realURL {
				res.real = append(res.real, r)
			} else {
				res.bare = append(res.bare, r)
			}
		}
	}
	return res, nil
}

// serve serves h on a fresh port of 127.0.0.1 with the server's timeouts.
func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listen: %w", err)
	}
	srv := httpapi.NewServer(ln.Addr().String(), h, httpapi.ServerConfig{})
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// bareHandler answers GET /v1/tenants/{tenantId}/task with only the Redis
// reads of the real endpoint — the tenant index (the newest entry of its
// history, ZREVRANGE 0 0), then HGETALL of the
// task record and GET of its checkpoint in one pipeline — and writes them as
// JSON: the floor under the real endpoint's cost. Keys are spelled out as in
// repository/keys.go; nothing is validated, decoded or logged.
func bareHandler(c *redis.Client, prefix string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tenants/{tenantId}/task", func(w http.ResponseWriter, r *http.Request) {
		tenant := r.PathValue("tenantId")
		ctx := r.Context()
		ids, err := c.ZRevRange(ctx, prefix+"index:tenant:{"+tenant+"}:history", 0, 0).Result()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if len(ids) == 0 {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		id := ids[0]
		p := c.Pipeline()
		rec := p.HGetAll(ctx, prefix+"task:{"+tenant+"}:"+id)
		ck := p.Get(ctx, prefix+"ckpt:{"+tenant+"}:"+id)
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		// The record's fields as they come, the checkpoint as stored: the
		// least JSON that holds the answer.
		b := make([]byte, 0, 2048)
		b = append(b, `{"task":{`...)
		first := true
		for k, v := range rec.Val() {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendJSONString(append(appendJSONString(b, k), ':'), v)
		}
		b = append(b, `},"checkpoint":`...)
		if ck.Err() == nil {
			b = append(b, ck.Val()...)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, "}\n"...)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
	return mux
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// checkAnswer asks base for a tenant's task and checks the answer names a
// COMPLETED task: both endpoints must answer the question being timed.
func checkAnswer(ctx context.Context, c *http.Client, base, tenant string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/tenants/"+tenant+"/task", nil)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", req.URL, resp.StatusCode, body)
	}
	var doc struct {
		Status string `json:"status"`
		Task   struct {
			Status string `json:"status"`
		} `json:"task"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("GET %s: %w", req.URL, err)
	}
	if doc.Status != "COMPLETED" && doc.Task.Status != "COMPLETED" {
		return fmt.Errorf("GET %s: %s, want a COMPLETED task", req.URL, body)
	}
	return nil
}

// load sends GET requests for random tenants of n from clients goroutines
// for d and returns the request rate and latency percentiles. Any answer
// but 200 fails the run.
func load(ctx context.Context, c *http.Client, base string, n, clients int, d time.Duration) (loadResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stop atomic.Bool
	var failed atomic.Pointer[error]
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), uint64(start.UnixNano())))
			lat := make([]time.Duration, 0, 1<<14)
			buf := make([]byte, 8<<10)
			for !stop.Load() {
				url := base + "/v1/tenants/" + tenantID(rnd.IntN(n)) + "/task"
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				t0 := time.Now()
				resp, err := c.Do(req)
				if err == nil {
					for {
						if _, rerr := resp.Body.Read(buf); rerr != nil {
							break
						}
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
					}
				}
				if err != nil {
					if !stop.Load() {
						failed.CompareAndSwap(nil, &err)
					}
					return
				}
				lat = append(lat, time.Since(t0))
			}
			lats[g] = lat
		}()
	}
	waitCtx(ctx, d)
	stop.Store(true)
	wg.Wait()
	took := time.Since(start)
	if p := failed.Load(); p != nil {
		return loadResult{}, *p
	}
	all := slices.Concat(lats...)
	if len(all) == 0 {
		return loadResult{}, errors.New("no request completed")
	}
	slices.Sort(all)
	return loadResult{requests: len(all), took: took, p50: all[len(all)/2], p99: all[len(all)*99/100]}, nil
}
