package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of three masters (no replicas) on random
// ports, made with redis-cli --cluster create: what docs/architecture.md asks the
// real-Redis suites to run on, since miniredis cannot catch slot bugs.
//
// StartCluster gives a test a cluster of its own (one it may reshard);
// SharedCluster gives every test of a binary the same one (each test uses
// its own key prefix), started on first use and stopped by Main.
type Cluster struct {
	// Nodes are the masters as created, in port order of creation.
	Nodes []*ClusterNode
	dir   string
}

// ClusterNode is one master of a Cluster.
type ClusterNode struct {
	Addr string
	// ID is the node id (CLUSTER MYID).
	ID string
	p  *proc
}

// clusterMasters is the number of masters of every test cluster.
const clusterMasters = 3

// StartCluster starts a 3-master cluster owned by the test and stops it
// when the test ends. It skips (or fails when Required) if redis-server or
// redis-cli is not installed.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	if why := binaries(true); why != "" {
		unreachable(t, why)
	}
	c, err := newCluster(t.TempDir())
	if err != nil {
		if c != nil {
			c.stop()
		}
		t.Fatalf("start redis cluster: %v", err)
	}
	t.Cleanup(c.stop)
	return c
}

var shared struct {
	once sync.Once
	c    *Cluster
	err  error
	why  string // why it cannot run here (skip)
}

// SharedCluster returns the test binary's shared cluster, starting it on
// first use; Main stops it when the tests end (and the kernel kills it if
// the binary dies first, see spawn). Tests keep to their own key prefix.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		if shared.why = binaries(true); shared.why != "" {
			return
		}
		dir, err := os.MkdirTemp("", "redistest-cluster-")
		if err != nil {
			shared.err = err
			return
		}
		shared.c, shared.err = newCluster(dir)
		if shared.err != nil && shared.c != nil {
			shared.c.stop()
			shared.c = nil
		}
	})
	switch {
	case shared.why != "":
		unreachable(t, shared.why)
	case shared.err != nil:
		t.Fatalf("start the shared redis cluster: %v", shared.err)
	}
	return shared.c
}

// stopShared stops the shared cluster, if one was started.
func stopShared() {
	if shared.c != nil {
		shared.c.stop()
	}
}

// NewCluster starts a 3-master cluster with its files under dir, for a
// program that is not a test (the benchmark command); Close stops it.
func NewCluster(dir string) (*Cluster, error) {
	if why := binaries(true); why != "" {
		return nil, errors.New("redistest: " + why)
	}
	c, err := newCluster(dir)
	if err != nil && c != nil {
		c.stop()
		c = nil
	}
	return c, err
}

// Close stops every node and removes the cluster's directory.
func (c *Cluster) Close() { c.stop() }

// Main runs the tests of a package that uses SharedCluster (through
// Backends), then stops the cluster: func TestMain(m *testing.M) {
// os.Exit(redistest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	stopShared()
	return code
}

// newCluster starts three cluster-enabled redis-servers under dir, joins
// them with redis-cli --cluster create and waits until every node says
// cluster_state:ok. On error the returned cluster (if any) holds what was
// started, for stop.
func newCluster(dir string) (*Cluster, error) {
	c := &Cluster{dir: dir}
	for i := 0; i < clusterMasters; i++ {
		// The cluster bus listens on port+10000 (cluster-port exists only
		// from Redis 7.0 on): a free port whose bus port is free too.
		p, err := newProc(dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no")
		for tries := 0; err == nil && !busFree(p.Port); tries++ {
			if tries == 100 {
				return c, fmt.Errorf("no free port with a free cluster bus port after 100 tries")
			}
			_ = os.RemoveAll(p.dir)
			p, err = newProc(dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no")
		}
		if err != nil {
			return c, err
		}
		n := &ClusterNode{Addr: p.Addr, p: p}
		c.Nodes = append(c.Nodes, n)
		if err := p.start(); err != nil {
			return c, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr)
	}
	if _, err := run(ctx, "redis-cli", append(args, "--cluster-replicas", "0", "--cluster-yes")...); err != nil {
		return c, err
	}
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		id, err := cl.ClusterMyID(ctx).Result()
		_ = cl.Close()
		if err != nil {
			return c, fmt.Errorf("CLUSTER MYID of %s: %w", n.Addr, err)
		}
		n.ID = id
	}
	return c, c.WaitOK(ctx)
}

// busFree reports whether the cluster bus port of a node on port is free.
func busFree(port int) bool {
	if port+10000 > 65535 {
		return false
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// stop kills every node and removes the cluster's directory.
func (c *Cluster) stop() {
	for _, n := range c.Nodes {
		n.p.kill()
	}
	_ = os.RemoveAll(c.dir)
}

// Restart kills a node (SIGKILL) and starts it again on the same port:
// it comes back empty (no persistence) but with its node id and slots (its
// nodes.conf stays), with a new run id. It waits until the cluster is ok.
func (c *Cluster) Restart(ctx context.Context, n *ClusterNode) error {
	n.p.kill()
	if err := n.p.start(); err != nil {
		return err
	}
	return c.WaitOK(ctx)
}

// Addrs returns the masters' addresses (seed nodes for a cluster client).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Client returns a cluster client with deadlines that reach the socket,
// closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// NodeClient returns a plain client of one node (to read what that node
// holds), closed when the test ends.
func (c *Cluster) NodeClient(t testing.TB, n *ClusterNode) *redis.Client {
	t.Helper()
	return NewClient(t, n.Addr)
}

// WaitOK waits until every node reports cluster_state:ok with every slot
// assigned and agrees on the slot map (after a create or a reshard).
func (c *Cluster) WaitOK(ctx context.Context) error {
	var last string
	for {
		ok := true
		var maps []string
		for _, n := range c.Nodes {
			cl := redis.NewClient(&redis.Options{Addr: n.Addr})
			info, err := cl.ClusterInfo(ctx).Result()
			slots, serr := cl.ClusterSlots(ctx).Result()
			_ = cl.Close()
			if err != nil || serr != nil {
				ok, last = false, fmt.Sprintf("%s: %v %v", n.Addr, err, serr)
				break
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_assigned:16384") {
				ok, last = false, n.Addr+": "+strings.TrimSpace(info)
				break
			}
			maps = append(maps, slotsString(slots))
		}
		if ok {
			for _, m := range maps[1:] {
				if m != maps[0] {
					ok, last = false, "nodes disagree on the slot map: "+strings.Join(maps, " | ")
				}
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ok: %s: %w", last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// slotsString is a canonical form of a CLUSTER SLOTS answer: each range
// and its master's id. (CLUSTER SLOTS, not SHARDS: SHARDS is Redis 7.0+.)
func slotsString(slots []redis.ClusterSlot) string {
	parts := make([]string, 0, len(slots))
	for _, s := range slots {
		master := ""
		if len(s.Nodes) > 0 {
			master = s.Nodes[0].ID
		}
		parts = append(parts, fmt.Sprintf("%05d-%05d:%s", s.Start, s.End, master))
	}
	slices.Sort(parts)
	return strings.Join(parts, ";")
}

// KeySlot is Redis Cluster's hash slot of key, computed here: CRC16
// (XMODEM) of the hash tag — the text between the first "{" and the next
// "}", when not empty — or of the whole key, modulo 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT).
func (c *Cluster) Slot(ctx context.Context, key string) (int, error) {
	cl := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr})
	defer cl.Close()
	n, err := cl.ClusterKeySlot(ctx, key).Result()
	return int(n), err
}

// slotMap returns the masters' slot ranges now (CLUSTER SLOTS; the first
// node of a range is its master).
func (c *Cluster) slotMap(ctx context.Context) ([]redis.ClusterSlot, error) {
	cl := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr})
	defer cl.Close()
	return cl.ClusterSlots(ctx).Result()
}

// Owner returns the master that serves slot now.
func (c *Cluster) Owner(ctx context.Context, slot int) (*ClusterNode, error) {
	slots, err := c.slotMap(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range slots {
		if slot < s.Start || slot > s.End || len(s.Nodes) == 0 {
			continue
		}
		for _, n := range c.Nodes {
			if n.ID == s.Nodes[0].ID {
				return n, nil
			}
		}
	}
	return nil, fmt.Errorf("no master serves slot %d", slot)
}

// Slots returns the slot ranges a master serves now ([start, end] pairs).
func (c *Cluster) Slots(ctx context.Context, n *ClusterNode) ([][2]int, error) {
	slots, err := c.slotMap(ctx)
	if err != nil {
		return nil, err
	}
	var out [][2]int
	for _, s := range slots {
		if len(s.Nodes) > 0 && s.Nodes[0].ID == n.ID {
			out = append(out, [2]int{s.Start, s.End})
		}
	}
	slices.SortFunc(out, func(a, b [2]int) int { return a[0] - b[0] })
	return out, nil
}

// Reshard moves the lowest count slots of from to to with redis-cli
// --cluster reshard (slot by slot: SETSLOT IMPORTING/MIGRATING, MIGRATE
// of the slot's keys, SETSLOT NODE), while clients go on (they get ASK
// and MOVED redirections), then waits until the nodes agree.
func (c *Cluster) Reshard(ctx context.Context, from, to *ClusterNode, count int) error {
	if _, err := run(ctx, "redis-cli", "--cluster", "reshard", from.Addr,
		"--cluster-from", from.ID, "--cluster-to", to.ID, "--cluster-slots", strconv.Itoa(count),
		"--cluster-yes"); err != nil {
		return err
	}
	return c.WaitOK(ctx)
}

// MigrateSlot moves one slot and its keys to a master the way redis-cli
// --cluster reshard does, while clients go on: SETSLOT IMPORTING on the
// target and MIGRATING on the source (clients get ASK for keys already
// moved), MIGRATE of the slot's keys ten at a time, then SETSLOT NODE on
// every node (clients get MOVED). It waits until the nodes agree.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, to *ClusterNode) error {
	from, err := c.Owner(ctx, slot)
	if err != nil || from == to {
		return err
	}
	fc := redis.NewClient(&redis.Options{Addr: from.Addr})
	defer fc.Close()
	tc := redis.NewClient(&redis.Options{Addr: to.Addr})
	defer tc.Close()
	if err := tc.Do(ctx, "cluster", "setslot", slot, "importing", from.ID).Err(); err != nil {
		return fmt.Errorf("SETSLOT %d IMPORTING on %s: %w", slot, to.Addr, err)
	}
	if err := fc.Do(ctx, "cluster", "setslot", slot, "migrating", to.ID).Err(); err != nil {
		return fmt.Errorf("SETSLOT %d MIGRATING on %s: %w", slot, from.Addr, err)
	}
	host, port, _ := net.SplitHostPort(to.Addr)
	for {
		keys, err := fc.ClusterGetKeysInSlot(ctx, slot, 10).Result()
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT %d on %s: %w", slot, from.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := fc.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("MIGRATE of slot %d from %s: %w", slot, from.Addr, err)
		}
	}
	// The target first, then the source (as redis-cli), then the others.
	order := []*ClusterNode{to, from}
	for _, n := range c.Nodes {
		if n != to && n != from {
			order = append(order, n)
		}
	}
	for _, n := range order {
		nc := redis.NewClient(&redis.Options{Addr: n.Addr})
		err := nc.Do(ctx, "cluster", "setslot", slot, "node", to.ID).Err()
		_ = nc.Close()
		if err != nil {
			return fmt.Errorf("SETSLOT %d NODE on %s: %w", slot, n.Addr, err)
		}
	}
	return c.WaitOK(ctx)
}

// KeysPerNode counts the keys under prefix that each master holds (SCAN
// MATCH on every master: tests may scan, the product may not).
func (c *Cluster) KeysPerNode(ctx context.Context, prefix string) (map[string]int, error) {
	out := map[string]int{}
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		keys, err := scanAll(ctx, cl, prefix)
		_ = cl.Close()
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", n.Addr, err)
		}
		out[n.Addr] = len(keys)
	}
	return out, nil
}

// scanAll returns every key under prefix on one server.
func scanAll(ctx context.Context, c *redis.Client, prefix string) ([]string, error) {
	var out []string
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		out = append(out, iter.Val())
	}
	return out, iter.Err()
}
