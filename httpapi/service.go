package httpapi

// Service is what the HTTP API serves; *facade.Coordinator implements it.
// Each group of routes declares the part it calls, next to its handlers:
// PlanService (plans.go), TenantService (tenants.go), FeedService
// (events.go) and RefusalRecorder (the audit trail, audit.go). Every method
// returns errors matching (errors.Is) at most one of the facade sentinels
// (facade.ErrInvalid, facade.ErrNotFound, ...), which the API maps to
// statuses and codes in one table (errors.go); anything else is answered
// 500 INTERNAL. The errors each method lists are the contract of that
// table.
type Service interface {
	PlanService
	TenantService
	FeedService
	RefusalRecorder
}
