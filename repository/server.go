package repository

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Unknown is the value of a ServerConfig field Redis would not tell (CONFIG
// disabled, renamed or not permitted; a server without the command).
const Unknown = "unknown"

// ServerInfo identifies the Redis server and reports the settings that
// decide whether deploycoord's data survives memory pressure and restarts.
type ServerInfo struct {
	// RunID changes whenever the server restarts or another one takes over
	// (INFO server run_id); "" when the server does not report it.
	RunID string
	// Version is redis_version, or Unknown.
	Version string
	// Config is the start-up self-check's report.
	Config ServerConfig
}

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

// Warnings returns the warnings of the server's config report.
func (i ServerInfo) Warnings() []string { return i.Config.Warnings() }

// ServerInfo returns the server's run id and version (INFO server) and its
// persistence and eviction settings (CONFIG GET), in one round trip. A
// server that does not answer INFO server or CONFIG GET (miniredis, CONFIG
// renamed or disabled, an ACL without the permission) gets Unknown fields,
// not an error; only an unreachable server is an error (*UnavailableError).
func (r *Redis) ServerInfo(ctx context.Context) (ServerInfo, error) {
	const op = "server info"
	params := []string{"maxmemory-policy", "appendonly", "appendfsync", "save"}
	pp := r.c.Pipeline()
	info := pp.Info(ctx, "server")
	gets := make([]*redis.MapStringStringCmd, len(params))
	for i, p := range params {
		gets[i] = pp.ConfigGet(ctx, p)
	}
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return ServerInfo{}, wrapErr(ctx, op, err)
	}
	out := ServerInfo{Version: Unknown}
	if err := info.Err(); err == nil {
		fields := parseInfo(info.Val())
		out.RunID = fields["run_id"]
		if v := fields["redis_version"]; v != "" {
			out.Version = v
		}
	} else if !isReply(err) {
		return ServerInfo{}, wrapErr(ctx, op, err)
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
			return ServerInfo{}, wrapErr(ctx, op, err)
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
// Redis restarted or failed over (facade.ServerWatcher).
func (r *Redis) ServerRunID(ctx context.Context) (string, error) {
	v, err := r.c.Info(ctx, "server").Result()
	switch {
	case err == nil:
		return parseInfo(v)["run_id"], nil
	case isReply(err):
		return "", nil
	}
	return "", wrapErr(ctx, "server run id", err)
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
