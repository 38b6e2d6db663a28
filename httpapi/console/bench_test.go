package console_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// BenchmarkPlanPage10k measures the plan page of a plan of 10 000 completed
// tenants on the real Redis, as the browser asks for it: the first page, a
// page deep in the plan, the FAILED filter (which finds none, so examines
// every entry), and the live fragment of 100 changed rows.
//
//	go test ./httpapi/console -run '^$' -bench PlanPage10k -benchtime 50x
func BenchmarkPlanPage10k(b *testing.B) {
	bd := setup(b, bundleOpts{realRedis: true})
	const n = 10_000
	spec := plan.Spec{Name: "big", Stages: []task.StageSpec{{Name: "noop", Kind: "noop"}}, MaxConcurrency: 200}
	for i := range n {
		spec.Tenants = append(spec.Tenants, plan.TenantSpec{TenantID: fmt.Sprintf("t-%05d", i)})
	}
	pv, err := bd.coord.CreatePlan(context.Background(), spec, facade.Actor{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		v, err := bd.coord.Plan(context.Background(), pv.ID)
		if err == nil && v.Status == plan.StatusCompleted {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("plan not done: %v %v", v.Counts, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	br := bd.signedIn(operatorSecret)
	frag := bd.ui("plans/" + pv.ID + "?fragment=1")
	for i := 0; i < 100; i++ {
		frag += fmt.Sprintf("&tenant=t-%05d", 5000+i)
	}
	for _, c := range []struct{ name, path string }{
		{"FirstPage", bd.ui("plans/" + pv.ID)},
		{"Page51", bd.ui("plans/" + pv.ID + "?cursor=5000&page=51")},
		{"FilterFailed", bd.ui("plans/" + pv.ID + "?status=FAILED")},
		{"Fragment100Rows", frag},
	} {
		b.Run(c.name, func(b *testing.B) {
			var size int
			for b.Loop() {
				req, _ := http.NewRequest("GET", bd.srv.URL+c.path, nil)
				p := br.do(req)
				if p.status != 200 {
					b.Fatalf("%s: %d", c.path, p.status)
				}
				size = len(p.body)
			}
			b.ReportMetric(float64(size), "bytes/page")
		})
	}
}
