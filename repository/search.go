package repository

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Cross-plan task search (GET /v1/tasks).
//
// Two indexes, kept by the writes that move the plan counts, answer it
// without reading every task:
//
//   - {p}plan:{planId}:status:<S> (one ZSET per plan and status, in the
//     plan's slot): the plan's tasks in status S, scored by when they
//     entered it (Unix microseconds). move_plan_counts.lua moves a task
//     between them in the same script that moves the counts, so they are
//     exactly as current as the counts; push_plan_tasks.lua fills PENDING.
//   - {p}plans:status:<S> (one ZSET per status, no hash tag): the plans
//     that have tasks in S, scored by the latest time (Unix ms) a task of
//     theirs entered S — an upper bound of their index's scores. The write
//     pipeline that moves the counts adds the plan (ZADD GT), so it costs
//     no round trip; a search that finds a plan's index empty removes the
//     plan (search_prune.lua, only if the score did not move meanwhile and
//     is older than pruneAfter).
//
// A page reads the plans indexes of the statuses asked for (one round
// trip, none with a plan id), then the plans in the order of their upper
// bound, a batch of searchPlanBatch plans per round trip, each with one
// search_plan_tasks.lua call returning its newest entries below the
// cursor, until the page's entries are known to be the newest (the next
// plan's upper bound is below them), then the records of the page (one
// round trip). A filter the indexes cannot apply (stage, the caller's
// Match) may drop entries: the search then continues below the last one,
// up to ScanMax entries examined (a page may then come short, with a
// cursor).

//go:embed scripts/search_plan_tasks.lua
var searchPlanTasksLua string

//go:embed scripts/search_prune.lua
var searchPruneLua string

//go:embed scripts/reindex_plan.lua
var reindexPlanLua string

var (
	searchPlanTasksScript = newScript("search_plan_tasks", searchPlanTasksLua)
	searchPruneScript     = newScript("search_prune", searchPruneLua)
	reindexPlanScript     = newScript("reindex_plan", reindexPlanLua)
)

const (
	// searchPlanBatch is how many plans one round trip of a search reads.
	searchPlanBatch = 32
	// pruneAfter is how long a plan stays in a plans-by-status index after
	// a task of it last entered the status, even when its own index is
	// empty (a move in flight may be about to fill it).
	pruneAfter = time.Minute
	// matchSlack widens TaskSearch.MatchStartedBefore: a run's index score
	// is taken when its write is sent, a moment after the task's own times,
	// and instances' clocks differ a little.
	matchSlack = time.Minute
)

// searchPos is a position in the search order: score (Unix microseconds)
// descending, then task id descending.
type searchPos struct {
	score int64
	id    string
}

// before reports whether a comes before b in the search order.
func (a searchPos) before(b searchPos) bool {
	return a.score > b.score || (a.score == b.score && a.id > b.id)
}

// String is the cursor: "<score>~<taskId>".
func (a searchPos) String() string { return strconv.FormatInt(a.score, 10) + "~" + a.id }

// parseSearchCursor reads a cursor made by searchPos.String.
func parseSearchCursor(s string) (searchPos, bool, error) {
	if s == "" {
		return searchPos{}, false, nil
	}
	score, id, ok := strings.Cut(s, "~")
	n, err := strconv.ParseInt(score, 10, 64)
	if !ok || err != nil || n < 0 || strconv.FormatInt(n, 10) != score || !task.ValidID(id) {
		return searchPos{}, false, fmt.Errorf("%w: cursor %s is not one this search returned", plan.ErrInvalid, task.Quote(s))
	}
	return searchPos{score: n, id: id}, true, nil
}

// searchQuery is a checked TaskSearch.
type searchQuery struct {
	f plan.TaskSearch
	// want[i]: task.Statuses[i] is asked for; match[i]: read for Match only.
	want, match [6]bool
	cur         searchPos
	hasCur      bool
	limit       int
	since       int64 // lowest score, math.MinInt64 for none
}

// checkSearch validates f.
func checkSearch(f plan.TaskSearch) (searchQuery, error) {
	q := searchQuery{f: f, limit: pageLimit(f.Limit), since: math.MinInt64}
	if f.Limit < 0 || f.Limit > plan.LimitMax {
		return q, fmt.Errorf("%w: limit %d out of range 1..%d", plan.ErrInvalid, f.Limit, plan.LimitMax)
	}
	for _, s := range f.Statuses {
		i := statusIndex(s)
		if i < 0 {
			return q, fmt.Errorf("%w: status %s", plan.ErrInvalid, task.Quote(string(s)))
		}
		q.want[i] = true
	}
	if len(f.Statuses) == 0 && f.Match == nil {
		q.want = [6]bool{true, true, true, true, true, true}
	}
	if r := statusIndex(task.StatusRunning); f.Match != nil && !q.want[r] {
		q.match[r] = true
	}
	if f.PlanID != "" && !plan.ValidID(f.PlanID) {
		return q, fmt.Errorf("%w: plan id %s", plan.ErrInvalid, task.Quote(f.PlanID))
	}
	if f.Stage != "" && !task.ValidStageName(f.Stage) {
		return q, fmt.Errorf("%w: stage %s", plan.ErrInvalid, task.Quote(f.Stage))
	}
	if !f.Since.IsZero() {
		q.since = micros(f.Since)
	}
	var err error
	q.cur, q.hasCur, err = parseSearchCursor(f.Cursor)
	return q, err
}

// keep reports whether the record t, found in the index of status
// task.Statuses[si], answers the search.
func (q *searchQuery) keep(t *task.Task, si int) bool {
	if !q.candidate(t, si) {
		return false
	}
	return q.want[si] || q.f.Match(t)
}

// candidate is keep without calling Match: whether t, found in the index
// of task.Statuses[si], may answer the search.
func (q *searchQuery) candidate(t *task.Task, si int) bool {
	if t.Status != task.Statuses[si] {
		// It moved since the index was read: it is found where it is now.
		return false
	}
	if q.f.PlanID != "" && t.PlanID != q.f.PlanID {
		return false
	}
	if q.f.Stage != "" && t.StageName != q.f.Stage {
		return false
	}
	return q.want[si] || q.match[si]
}

// searchPlan is a plan the search may read: the statuses to read in it and
// the upper bound of their index scores.
type searchPlan struct {
	id     string
	bound  int64    // Unix microseconds
	sets   []int    // indexes into task.Statuses
	scores [6]int64 // the plans index scores read (ms), for pruning
}

// searchHit is an index entry found by search_plan_tasks.lua.
type searchHit struct {
	pos    searchPos
	tenant string
	status int
}

// SearchTasks returns the tasks f selects across plans, newest first (by
// when they entered their status), and the cursor of the next page ("" at
// the end). A page may hold fewer than f.Limit tasks and still have a next
// one when filters the indexes cannot apply (Stage, Match) dropped
// entries. Round trips: 1 for the plans indexes (none with f.PlanID), 1
// per searchPlanBatch plans read, 1 for the records — 3 for a page whose
// tasks are among the 32 most recently active plans — more when filters
// drop entries (up to ScanMax examined).
func (r *Redis) SearchTasks(ctx context.Context, f plan.TaskSearch) ([]*task.Task, string, error) {
	const op = "search tasks"
	q, err := checkSearch(f)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	plans, err := r.searchPlans(ctx, &q)
	if err != nil {
		return nil, "", wrapErr(ctx, op, err)
	}
	var prune []pruneEntry
	defer func() { r.prune(ctx, prune) }()
	out := make([]*task.Task, 0, q.limit)
	for examined := 0; ; {
		hits, more, empty, err := r.searchRound(ctx, &q, plans)
		prune = append(prune, empty...)
		if err != nil {
			return nil, "", wrapErr(ctx, op, err)
		}
		ids := make([]string, len(hits))
		tenants := make([]string, len(hits))
		for i, h := range hits {
			ids[i], tenants[i] = h.pos.id, h.tenant
		}
		tasks, err := r.readTaskSlots(ctx, op, ids, tenants)
		if err != nil {
			return nil, "", err
		}
		for i, h := range hits {
			examined++
			q.cur, q.hasCur = h.pos, true
			if t := tasks[i]; t != nil && q.keep(t, h.status) {
				out = append(out, t)
				if len(out) == q.limit {
					if i == len(hits)-1 && !more {
						return out, "", nil
					}
					return out, q.cur.String(), nil
				}
			}
		}
		if !more {
			return out, "", nil
		}
		if examined >= r.scanMax {
			return out, q.cur.String(), nil
		}
	}
}

// searchPlans returns the plans a search reads, by upper bound descending.
func (r *Redis) searchPlans(ctx context.Context, q *searchQuery) ([]*searchPlan, error) {
	var sets []int
	for i := range task.Statuses {
		if q.want[i] || q.match[i] {
			sets = append(sets, i)
		}
	}
	if q.f.PlanID != "" {
		return []*searchPlan{{id: q.f.PlanID, bound: math.MaxInt64, sets: sets}}, nil
	}
	pp := r.c.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(sets))
	for j, si := range sets {
		k, _ := r.keys.PlansByStatus(task.Statuses[si])
		cmds[j] = pp.ZRevRangeWithScores(ctx, k, 0, -1)
	}
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return nil, err
	}
	byID := map[string]*searchPlan{}
	var out []*searchPlan
	for j, si := range sets {
		zs, err := cmds[j].Result()
		if err != nil {
			return nil, err
		}
		for _, z := range zs {
			id, _ := z.Member.(string)
			if !plan.ValidID(id) {
				continue
			}
			sp := byID[id]
			if sp == nil {
				sp = &searchPlan{id: id, bound: math.MinInt64}
				byID[id] = sp
				out = append(out, sp)
			}
			ms := int64(z.Score)
			sp.sets = append(sp.sets, si)
			sp.scores[si] = ms
			if b := ms*1000 + 999; b > sp.bound {
				sp.bound = b
			}
		}
	}
	slices.SortFunc(out, func(a, b *searchPlan) int {
		if c := cmp.Compare(b.bound, a.bound); c != 0 {
			return c
		}
		return cmp.Compare(b.id, a.id)
	})
	return out, nil
}

// pruneEntry is a plan whose index of a status was found empty.
type pruneEntry struct {
	status int
	planID string
	score  int64 // ms, as read
}

// searchRound returns the next q.limit index entries after q.cur across
// plans, newest first, whether there may be more after them, and the
// plans found with an empty index to prune.
func (r *Redis) searchRound(ctx context.Context, q *searchQuery, plans []*searchPlan) ([]searchHit, bool, []pruneEntry, error) {
	// key is the highest score plan p may return after the cursor.
	key := func(p *searchPlan) int64 {
		if q.hasCur {
			return min(p.bound, q.cur.score)
		}
		return p.bound
	}
	order := slices.Clone(plans)
	slices.SortStableFunc(order, func(a, b *searchPlan) int { return cmp.Compare(key(b), key(a)) })
	var hits []searchHit
	var empty []pruneEntry
	full := false // a plan returned q.limit entries: it may have more
	staleBefore := r.now().Add(-pruneAfter).UnixMilli()
	next := 0
	for next < len(order) {
		if key(order[next]) < q.since {
			next = len(order)
			break
		}
		batch := order[next:min(next+searchPlanBatch, len(order))]
		next += len(batch)
		pp := r.pipeline()
		cmds := make([]*evalCmd, len(batch))
		for i, p := range batch {
			cmds[i] = pp.eval(ctx, searchPlanTasksScript, r.searchKeys(p), r.searchArgs(q, p)...)
		}
		if err := pp.exec(ctx); err != nil {
			return nil, false, empty, err
		}
		for i, p := range batch {
			v, err := cmds[i].cmd.Slice()
			if err != nil {
				return nil, false, empty, err
			}
			if len(v) < len(p.sets) || (len(v)-len(p.sets))%4 != 0 {
				return nil, false, empty, fmt.Errorf("search plan %s: unexpected script reply", p.id)
			}
			for j, si := range p.sets {
				if replyInt(v[j]) == 0 && q.f.PlanID == "" && p.scores[si] < staleBefore {
					empty = append(empty, pruneEntry{status: si, planID: p.id, score: p.scores[si]})
				}
			}
			n := 0
			for k := len(p.sets); k+3 < len(v); k += 4 {
				score, err := strconv.ParseFloat(replyStr(v[k]), 64)
				set := int(replyInt(v[k+3])) - 2
				id := replyStr(v[k+1])
				if err != nil || set < 0 || set >= len(p.sets) || !task.ValidID(id) {
					return nil, false, empty, fmt.Errorf("%w: search plan %s: bad entry %v", ErrCorrupt, p.id, v[k:k+4])
				}
				tenant := replyStr(v[k+2])
				if !task.ValidTenantID(tenant) {
					tenant = ""
				}
				hits = append(hits, searchHit{pos: searchPos{score: int64(score), id: id}, tenant: tenant, status: p.sets[set]})
				n++
			}
			if n >= q.limit {
				full = true
			}
		}
		slices.SortFunc(hits, func(a, b searchHit) int {
			if a.pos.before(b.pos) {
				return -1
			}
			if b.pos.before(a.pos) {
				return 1
			}
			return 0
		})
		if next < len(order) {
			// The entries of the plans not read yet score at most bound.
			bound := key(order[next])
			known := 0
			for _, h := range hits {
				if h.pos.score <= bound {
					break
				}
				known++
			}
			if known >= q.limit {
				break
			}
		}
	}
	more := full || next < len(order) || len(hits) > q.limit
	return hits[:min(len(hits), q.limit)], more, empty, nil
}

// searchKeys returns the keys of search_plan_tasks.lua for p.
func (r *Redis) searchKeys(p *searchPlan) []string {
	pk, _ := r.keys.planKeys(p.id)
	sk := r.keys.statusKeys(p.id)
	keys := make([]string, 0, 1+len(p.sets))
	keys = append(keys, pk.counts)
	for _, si := range p.sets {
		keys = append(keys, sk[si])
	}
	return keys
}

// searchArgs returns the arguments of search_plan_tasks.lua for p.
func (r *Redis) searchArgs(q *searchQuery, p *searchPlan) []any {
	args := make([]any, 0, 4+len(p.sets))
	low := "-inf"
	if q.since != math.MinInt64 {
		low = strconv.FormatInt(q.since, 10)
	}
	cur, curID := "+inf", ""
	if q.hasCur {
		cur, curID = strconv.FormatInt(q.cur.score, 10), q.cur.id
	}
	args = append(args, q.limit, low, cur, curID)
	for _, si := range p.sets {
		high := "+inf"
		if q.match[si] && !q.f.MatchStartedBefore.IsZero() {
			high = strconv.FormatInt(micros(q.f.MatchStartedBefore.Add(matchSlack)), 10)
		}
		args = append(args, high)
	}
	return args
}

// readTaskSlots reads the records of tasks by id: out[i] is ids[i]'s
// record, nil when it is missing. One round trip (two when a tenant is
// unknown: its taskref is read first).
func (r *Redis) readTaskSlots(ctx context.Context, op string, ids, tenants []string) ([]*task.Task, error) {
	out := make([]*task.Task, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	tasks, err := r.readTasks(ctx, op, ids, tenants)
	if err != nil {
		return nil, err
	}
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		at[id] = i
	}
	for _, t := range tasks {
		if i, ok := at[t.ID]; ok {
			out[i] = t
		}
	}
	return out, nil
}

// prune removes plans from the plans-by-status indexes whose own index
// was found empty (search_prune.lua), best effort: one round trip when
// there is anything to remove.
func (r *Redis) prune(ctx context.Context, entries []pruneEntry) {
	if len(entries) == 0 {
		return
	}
	var args [6][]any
	for _, e := range entries {
		args[e.status] = append(args[e.status], e.planID, e.score)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	pp := r.pipeline()
	for si, a := range args {
		if len(a) > 0 {
			k, _ := r.keys.PlansByStatus(task.Statuses[si])
			pp.eval(ctx, searchPruneScript, []string{k}, a...)
		}
	}
	_ = pp.exec(ctx)
}

// indexPlans adds planID to the plans-by-status index of each status, at
// least at time at (ZADD GT: a score never goes down), on pp.
func (r *Redis) indexPlans(ctx context.Context, pp *pipe, planID string, at time.Time, statuses ...task.Status) {
	for _, s := range statuses {
		if k, err := r.keys.PlansByStatus(s); err == nil {
			pp.p.ZAddGT(ctx, k, redis.Z{Score: float64(at.UnixMilli()), Member: planID})
		}
	}
}

// indexMoves adds the plan of a move_plan_counts.lua call to the
// plans-by-status index of each status its moves go to, on pp: the same
// pipeline, so a status change stays one round trip.
func (r *Redis) indexMoves(ctx context.Context, pp *pipe, mc *moveCall) {
	planID := planOfKey(mc.keys[1])
	us, ok := int64Arg(mc.args[10])
	if planID == "" || !ok {
		return
	}
	var seen [6]bool
	for _, req := range mc.reqs {
		s := stringArg(req.mArgs[1])
		if i := statusIndex(task.Status(s)); i >= 0 && !seen[i] {
			seen[i] = true
			r.indexPlans(ctx, pp, planID, time.UnixMicro(us), task.Status(s))
		}
	}
}

// unindexGone removes plans whose record is missing from the
// plans-by-status indexes, best effort, in one round trip (none when
// planIDs is empty). The plans-by-status ZADD goes in the pipeline of the
// counts move (another slot: it cannot be in the script), before the move
// can tell that the plan record is gone — Redis lost its data (restarted
// empty) under a running instance, or the plan expired — so the ZADD has
// just named a plan that does not exist: a ghost every search would read
// (and page past) until it pruned it a minute later. A gone plan never
// comes back (plan ids are unique), so removing it from every status is
// exact; should this fail, the search's own pruning still removes it.
func (r *Redis) unindexGone(ctx context.Context, planIDs []string) {
	pp := r.c.Pipeline()
	for _, id := range planIDs {
		if id == "" {
			continue
		}
		for _, s := range task.Statuses {
			k, _ := r.keys.PlansByStatus(s)
			pp.ZRem(ctx, k, id)
		}
	}
	if pp.Len() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, _ = pp.Exec(ctx)
}

// dropSearchIndexes deletes a plan's status indexes and removes it from the
// plans-by-status indexes, on pp (a rolled-back plan creation).
func (r *Redis) dropSearchIndexes(ctx context.Context, pp *pipe, planID string) {
	sk := r.keys.statusKeys(planID)
	pp.p.Del(ctx, sk[0], sk[1], sk[2], sk[3], sk[4], sk[5])
	for _, s := range task.Statuses {
		k, _ := r.keys.PlansByStatus(s)
		pp.p.ZRem(ctx, k, planID)
	}
}

// reindexPlan rebuilds a plan's status indexes from its ledger and adds
// the plan to the plans-by-status index of every status it has tasks in:
// two round trips (RepairCounts).
func (r *Redis) reindexPlan(ctx context.Context, op, planID string) error {
	pk, _ := r.keys.planKeys(planID)
	sk := r.keys.statusKeys(planID)
	now := r.now()
	v, err := r.run(ctx, reindexPlanScript, []string{pk.counts, sk[0], sk[1], sk[2], sk[3], sk[4], sk[5]}, micros(now), r.ttlMs())
	if err != nil {
		return wrapErr(ctx, op, err)
	}
	n, err := replySlice(op, v)
	if err != nil || len(n) != len(task.Statuses) {
		return fmt.Errorf("%s: unexpected reindex reply %v", op, v)
	}
	pp := r.pipeline()
	for i, s := range task.Statuses {
		if replyInt(n[i]) > 0 {
			r.indexPlans(ctx, pp, planID, now, s)
		}
	}
	return wrapErr(ctx, op, pp.exec(ctx))
}

// planOfKey returns the plan id of a {p}plan:{<planId>} key, "" if none.
func planOfKey(key string) string {
	i := strings.LastIndexByte(key, '{')
	j := strings.LastIndexByte(key, '}')
	if i < 0 || j < i {
		return ""
	}
	return key[i+1 : j]
}

// createdAt returns p's creation time, now when it has none.
func createdAt(p *plan.Plan, now time.Time) time.Time {
	if p.CreatedAt.IsZero() {
		return now
	}
	return p.CreatedAt
}
