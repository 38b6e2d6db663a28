package repository

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Unknown is the value of a ServerConfig field Redis would not tell (CONFIG
// disabled, renamed or not permitted; a server without the command).
const Unknown = "unknown"

// ServerInfo identifies the Redis server and reports the settings that
// decide whether deploycoord's data survives memory pressure and restarts.
// On a Redis Cluster it sums up every master's report (Masters); behind
// Sentinel it is the current master's.
type ServerInfo struct {
	// RunID changes whenever the server restarts or another one takes over
	// (INFO server run_id); "" when the server does not report it. On a
	// cluster it names every master and its run id ("<addr>=<run id>,...",
	// by address), so a restart or failover of any master, or a master
	// joining or leaving, changes it.
	RunID string
	// Version is redis_version, or Unknown (on a cluster: the masters'
	// versions, comma-separated when they differ).
	Version string
	// Config is the start-up self-check's report (on a cluster: each field
	// as the masters report it when they agree, else Mixed).
	Config ServerConfig
	// Masters are the masters' own reports on a Redis Cluster, by address;
	// nil on a single Redis or behind Sentinel.
	Masters []MasterInfo
}

// MasterInfo is one cluster master's report.
type MasterInfo struct {
	Addr    string
	RunID   string
	Version string
	Config  ServerConfig
}

// Mixed is the value of a cluster's ServerConfig field on which its
// masters disagree (each master's is in ServerInfo.Masters).
const Mixed = "mixed"

// ServerConfig holds the CONFIG GET answers of the self-check; a field is
// Unknown when Redis refused to tell.
type ServerConfig struct {
	MaxmemoryPolicy string
	AppendOnly      string
	AppendFsync     string
	Save            string
	// Refused is Redis' answer when CONFIG GET was refused ("" otherwise).
	Refused string
}

// Warnings explains what in the report puts deploycoord's data at risk:
// an eviction policy other than noeviction, no persistence at all, settings
// that could not be read. None for a server with noeviction and persistence.
func (c ServerConfig) Warnings() []string {
	var out []string
	switch c.MaxmemoryPolicy {
	case "noeviction":
	case Unknown, "":
		out = append(out, "maxmemory-policy is unknown (CONFIG GET refused: "+c.refusal()+"): "+
			"make sure it is noeviction, or Redis may evict task records, locks and fencing counters under memory pressure")
	default:
		out = append(out, fmt.Sprintf("maxmemory-policy is %s: Redis may evict task records, locks and fencing counters "+
			"under memory pressure; set noeviction", c.MaxmemoryPolicy))
	}
	aofUnknown := c.AppendOnly == Unknown || c.AppendOnly == ""
	saveUnknown := c.Save == Unknown
	switch {
	case aofUnknown && saveUnknown:
		out = append(out, "persistence is unknown (CONFIG GET refused: "+c.refusal()+"): "+
			"without appendonly or save a Redis restart loses every plan, task and fencing counter")
	case c.AppendOnly == "no" && strings.TrimSpace(c.Save) == "":
		out = append(out, `no persistence (appendonly no, save ""): a Redis restart loses every plan, task and `+
			"fencing counter; set appendonly yes with appendfsync everysec")
	case c.AppendOnly == "yes" && c.AppendFsync == "no":
		out = append(out, "appendfsync is no: a crash of the host may lose the last 30 seconds of writes; set appendfsync everysec")
	}
	return out
}

func (c ServerConfig) refusal() string {
	if c.Refused == "" {
		return "no answer"
	}
	return c.Refused
}

// Warnings returns the warnings of the server's config report; on a
// cluster, each master's, prefixed with the master's address ("all N
// masters" when every master has it).
func (i ServerInfo) Warnings() []string {
	if len(i.Masters) == 0 {
		return i.Config.Warnings()
	}
	var order []string
	on := map[string][]string{}
	for _, m := range i.Masters {
		for _, w := range m.Config.Warnings() {
			if _, ok := on[w]; !ok {
				order = append(order, w)
			}
			on[w] = append(on[w], m.Addr)
		}
	}
	var out []string
	for _, w := range order {
		if len(on[w]) == len(i.Masters) {
			out = append(out, fmt.Sprintf("all %d masters: %s", len(i.Masters), w))
			continue
		}
		for _, addr := range on[w] {
			out = append(out, "master "+addr+": "+w)
		}
	}
	return out
}

// ServerInfo returns the server's run id and version (INFO server) and its
// persistence and eviction settings (CONFIG GET), in one round trip (on a
// cluster, one to every master, at once). A server that does not answer
// INFO server or CONFIG GET (miniredis, CONFIG renamed or disabled, an ACL
// without the permission) gets Unknown fields, not an error; only an
// unreachable server (any master of a cluster) is an error
// (*UnavailableError).
func (r *Redis) ServerInfo(ctx context.Context) (ServerInfo, error) {
	const op = "server info"
	cc, ok := r.c.(*redis.ClusterClient)
	if !ok {
		info, err := serverInfo(ctx, r.c)
		if err != nil {
			return ServerInfo{}, wrapErr(ctx, op, err)
		}
		return info, nil
	}
	var mu sync.Mutex
	var masters []MasterInfo
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := serverInfo(ctx, c)
		if err != nil {
			return err
		}
		mu.Lock()
		masters = append(masters, MasterInfo{Addr: c.Options().Addr, RunID: info.RunID, Version: info.Version, Config: info.Config})
		mu.Unlock()
		return nil
	})
	if err != nil {
		return ServerInfo{}, wrapErr(ctx, op, err)
	}
	return clusterInfo(masters), nil
}

// clusterInfo sums up the masters' reports.
func clusterInfo(masters []MasterInfo) ServerInfo {
	slices.SortFunc(masters, func(a, b MasterInfo) int { return strings.Compare(a.Addr, b.Addr) })
	out := ServerInfo{Masters: masters, Version: Unknown}
	if len(masters) == 0 {
		return out
	}
	var ids, versions []string
	told := true
	for _, m := range masters {
		ids = append(ids, m.Addr+"="+m.RunID)
		told = told && m.RunID != ""
		if !slices.Contains(versions, m.Version) {
			versions = append(versions, m.Version)
		}
	}
	if told { // a master that does not tell: no run id, as on a single Redis
		out.RunID = strings.Join(ids, ",")
	}
	out.Version = strings.Join(versions, ",")
	agree := func(field func(ServerConfig) string) string {
		v := field(masters[0].Config)
		for _, m := range masters[1:] {
			if field(m.Config) != v {
				return Mixed
			}
		}
		return v
	}
	out.Config = ServerConfig{
		MaxmemoryPolicy: agree(func(c ServerConfig) string { return c.MaxmemoryPolicy }),
		AppendOnly:      agree(func(c ServerConfig) string { return c.AppendOnly }),
		AppendFsync:     agree(func(c ServerConfig) string { return c.AppendFsync }),
		Save:            agree(func(c ServerConfig) string { return c.Save }),
		Refused:         agree(func(c ServerConfig) string { return c.Refused }),
	}
	return out
}

// serverInfo reads one server's report in one pipeline; errors are
// go-redis's (the caller wraps them).
func serverInfo(ctx context.Context, c redis.Cmdable) (ServerInfo, error) {
	params := []string{"maxmemory-policy", "appendonly", "appendfsync", "save"}
	pp := c.Pipeline()
	info := pp.Info(ctx, "server")
	gets := make([]*redis.MapStringStringCmd, len(params))
	for i, p := range params {
		gets[i] = pp.ConfigGet(ctx, p)
	}
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return ServerInfo{}, err
	}
	out := ServerInfo{Version: Unknown}
	if err := info.Err(); err == nil {
		fields := parseInfo(info.Val())
		out.RunID = fields["run_id"]
		if v := fields["redis_version"]; v != "" {
			out.Version = v
		}
	} else if !isReply(err) {
		return ServerInfo{}, err
	}
	vals := make([]string, len(params))
	for i, g := range gets {
		vals[i] = Unknown
		switch err := g.Err(); {
		case err == nil:
			if v, ok := g.Val()[params[i]]; ok {
				vals[i] = v
			}
		case isReply(err):
			if out.Config.Refused == "" {
				out.Config.Refused = firstLine(err.Error())
			}
		default:
			return ServerInfo{}, err
		}
	}
	out.Config.MaxmemoryPolicy, out.Config.AppendOnly, out.Config.AppendFsync, out.Config.Save = vals[0], vals[1], vals[2], vals[3]
	return out, nil
}

// firstLine keeps the first line of a Redis error reply, short.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// ServerRunID returns the server's run id (INFO server), "" when the server
// does not report one (miniredis). One round trip. A change of run id means
// Redis restarted or failed over (facade.ServerWatcher). On a cluster it
// is every master's ("<addr>=<run id>,...", as ServerInfo.RunID): one INFO
// to each master at once, after the client re-reads the slot map (CLUSTER
// SLOTS, so a master that joined or left is seen at once); any master
// restarted or failed over, or a master more or less, changes it. Behind
// Sentinel the failover client asks the current master.
func (r *Redis) ServerRunID(ctx context.Context) (string, error) {
	const op = "server run id"
	cc, ok := r.c.(*redis.ClusterClient)
	if !ok {
		v, err := r.c.Info(ctx, "server").Result()
		switch {
		case err == nil:
			return parseInfo(v)["run_id"], nil
		case isReply(err):
			return "", nil
		}
		return "", wrapErr(ctx, op, err)
	}
	var mu sync.Mutex
	var masters []MasterInfo
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		v, err := c.Info(ctx, "server").Result()
		if err != nil && !isReply(err) {
			return err
		}
		mu.Lock()
		masters = append(masters, MasterInfo{Addr: c.Options().Addr, RunID: parseInfo(v)["run_id"]})
		mu.Unlock()
		return nil
	})
	if err != nil {
		return "", wrapErr(ctx, op, err)
	}
	return clusterInfo(masters).RunID, nil
}

// RunIDOnConnect returns a go-redis OnConnect function (redis.Options,
// FailoverOptions) that reads the run id of the server each new connection
// reaches (INFO server, one round trip per connection, not per command)
// and hands it to observe before the connection carries a command: after a
// restart or a Sentinel failover every connection is new, so the change is
// seen before the first write reaches the new server. It never fails a
// connection: a server that does not answer INFO (miniredis) is observed
// as "". go-redis runs the same function on its connections to the
// sentinels, and a cluster node's run id is not the cluster's
// (ServerRunID polls every master): a server whose redis_mode is sentinel
// or cluster is not observed.
func RunIDOnConnect(observe func(runID string)) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		v, err := cn.Info(ctx, "server").Result()
		if err != nil {
			return nil
		}
		fields := parseInfo(v)
		if mode := fields["redis_mode"]; mode == "sentinel" || mode == "cluster" {
			return nil
		}
		observe(fields["run_id"])
		return nil
	}
}

// parseInfo reads the "field:value" lines of an INFO reply.
func parseInfo(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}
