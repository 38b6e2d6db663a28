package repository

import (
	"maps"
	"slices"
	"strings"

	"github.com/deploycoord/deploycoord/task"
)

// The memory store keeps the PENDING tasks of a new plan compact: not as a
// record each (a copy of every field, an entry in the task map and a
// history map per tenant), but as a freshSet — one template record for the
// plan and, per task, what differs from it (the tenant and the params, the
// whole record only for a task that differs in more). A task leaves the
// set, becoming a memTask, when it is first written or otherwise touched
// (thaw); reads of a task still in the set build its record on the fly.
// The set goes once every task left it. The tenant index is kept for every
// task as before, so the stores answer alike; only the records wait.

// freshSet holds the never-written tasks of one plan, in plan order.
type freshSet struct {
	planID string
	tmpl   task.Task
	items  []freshItem
	// byID indexes items by task id (sorted ids).
	byID []int32
	// score is the plan's creation time in Unix ms, the history score of a
	// task created without a time.
	score int64
	// left counts the items not thawed yet.
	left int
	// low is the first position not thawed yet: tasks are mostly started
	// in plan order, a few at a time, so the items from it on are looked
	// at before searching.
	low int
}

// findWindow is how many items from freshSet.low find compares before it
// searches.
const findWindow = 256

type freshItem struct {
	id, tenant string
	params     map[string]any
	// full is the whole record of a task that differs from the template
	// in more than id, tenant and params.
	full *task.Task
	// gone is set once the task was thawed (it is a memTask now, or was
	// and left memory).
	gone bool
}

// newFreshSet returns the set of tasks (copies, as copyTaskIn makes them,
// with seq 0).
func newFreshSet(planID string, tasks []*task.Task, score int64) (*freshSet, error) {
	fs := &freshSet{planID: planID, items: make([]freshItem, len(tasks)), byID: make([]int32, len(tasks)),
		score: score, left: len(tasks)}
	for i, t := range tasks {
		cp, err := copyTaskIn(t)
		if err != nil {
			return nil, err
		}
		c, params := *cp, cp.Params
		c.Params, c.Seq = nil, 0
		if i == 0 {
			fs.tmpl = c
			fs.tmpl.ID, fs.tmpl.TenantID = "", ""
		}
		it := freshItem{id: t.ID, tenant: t.TenantID, params: params}
		if !sameShape(&c, &fs.tmpl) {
			c.Params = params
			it.full = &c
		}
		fs.items[i] = it
		fs.byID[i] = int32(i)
	}
	slices.SortFunc(fs.byID, func(a, b int32) int { return strings.Compare(fs.items[a].id, fs.items[b].id) })
	return fs, nil
}

// sameShape reports whether a and b agree on every field but the id, the
// tenant and the params (times normalized by utc).
func sameShape(a, b *task.Task) bool {
	return a.PlanID == b.PlanID && a.Status == b.Status && a.PauseRequested == b.PauseRequested &&
		a.CancelRequested == b.CancelRequested && a.Attempt == b.Attempt && a.StageIndex == b.StageIndex &&
		a.StageName == b.StageName && a.TotalStages == b.TotalStages && a.LastError == b.LastError &&
		a.Reason == b.Reason && a.Owner == b.Owner && a.HeartbeatAt == b.HeartbeatAt && a.Fence == b.Fence &&
		a.Seq == b.Seq && a.CreatedAt == b.CreatedAt && a.StartedAt == b.StartedAt &&
		a.FinishedAt == b.FinishedAt && a.UpdatedAt == b.UpdatedAt && a.StageStartedAt == b.StageStartedAt
}

// find returns the position of the task with id still in the set, or -1.
func (fs *freshSet) find(id string) int {
	for i := fs.low; i < min(fs.low+findWindow, len(fs.items)); i++ {
		if fs.items[i].id == id {
			if fs.items[i].gone {
				return -1
			}
			return i
		}
	}
	i, ok := slices.BinarySearchFunc(fs.byID, id, func(x int32, id string) int { return strings.Compare(fs.items[x].id, id) })
	if !ok || fs.items[fs.byID[i]].gone {
		return -1
	}
	return int(fs.byID[i])
}

// record returns item i as a record of its own (sharing its params: copy
// them out with copyTaskOut).
func (fs *freshSet) record(i int) *task.Task {
	it := &fs.items[i]
	var t task.Task
	if it.full != nil {
		t = *it.full
	} else {
		t = fs.tmpl
		t.Params = it.params
	}
	t.ID, t.TenantID = it.id, it.tenant
	return &t
}

// historyScore is the history score of item i.
func (fs *freshSet) historyScore(i int) int64 {
	t := &fs.tmpl
	if full := fs.items[i].full; full != nil {
		t = full
	}
	if t.CreatedAt.IsZero() {
		return fs.score
	}
	return t.CreatedAt.UnixMilli()
}

// freshLocked returns the set holding the never-written task id and its
// position (nil, -1 if none). planID, when known, is looked at first.
func (m *Memory) freshLocked(id, planID string) (*freshSet, int) {
	if fs := m.fresh[planID]; fs != nil {
		if i := fs.find(id); i >= 0 {
			return fs, i
		}
	}
	for _, fs := range m.fresh {
		if fs.planID == planID {
			continue
		}
		if i := fs.find(id); i >= 0 {
			return fs, i
		}
	}
	return nil, -1
}

// taskLocked returns the task id in memory, thawing it if it was never
// written; nil if memory does not hold it. planID, when known, speeds up
// the search.
func (m *Memory) taskLocked(id, planID string) *memTask {
	if mt := m.tasks[id]; mt != nil {
		return mt
	}
	fs, i := m.freshLocked(id, planID)
	if fs == nil {
		return nil
	}
	return m.thawLocked(fs, i)
}

// viewLocked returns the task id in memory for reading: a never-written
// task is not thawed, its record is built for the read (nil if memory does
// not hold the task).
func (m *Memory) viewLocked(id string) *memTask {
	if mt := m.tasks[id]; mt != nil {
		return mt
	}
	if fs, i := m.freshLocked(id, ""); fs != nil {
		return &memTask{t: fs.record(i)}
	}
	return nil
}

// thawLocked turns item i of fs into a memTask (with its history entry;
// the index already names it if it is the tenant's newest).
func (m *Memory) thawLocked(fs *freshSet, i int) *memTask {
	t := fs.record(i)
	score := fs.historyScore(i)
	fs.items[i] = freshItem{id: fs.items[i].id, gone: true}
	for fs.low < len(fs.items) && fs.items[fs.low].gone {
		fs.low++
	}
	if fs.left--; fs.left == 0 {
		delete(m.fresh, fs.planID)
	}
	mt := &memTask{t: t}
	m.tasks[t.ID] = mt
	m.noteSize(&m.peakTasks, len(m.tasks))
	h := m.history[t.TenantID]
	if h == nil {
		h = map[string]int64{}
		m.history[t.TenantID] = h
		m.noteSize(&m.peakHistory, len(m.history))
	}
	h[t.ID] = score
	return mt
}

// freshOfTenant calls f with each task of tenant still in a fresh set (a
// record of its own) and its history score.
func (m *Memory) freshOfTenant(tenant string, f func(t *task.Task, score int64)) {
	for _, fs := range m.fresh {
		for i := range fs.items {
			if it := &fs.items[i]; !it.gone && it.tenant == tenant {
				f(fs.record(i), fs.historyScore(i))
			}
		}
	}
}

// noteSize records a map's size after it grew.
func (m *Memory) noteSize(peak *int, n int) {
	if n > *peak {
		*peak = n
	}
}

// shrinkLocked reallocates the task maps that emptied or fell far below
// their peak: a Go map keeps the memory of its largest size.
func (m *Memory) shrinkLocked() {
	m.tasks = shrunk(m.tasks, &m.peakTasks)
	m.index = shrunk(m.index, &m.peakIndex)
	m.history = shrunk(m.history, &m.peakHistory)
	m.plans = shrunk(m.plans, &m.peakPlans)
}

// shrinkMin is the peak size below which a map is left alone.
const shrinkMin = 256

func shrunk[K comparable, V any](mp map[K]V, peak *int) map[K]V {
	if *peak < shrinkMin || len(mp) > *peak/8 {
		return mp
	}
	*peak = len(mp)
	out := make(map[K]V, len(mp))
	maps.Copy(out, mp)
	return out
}
