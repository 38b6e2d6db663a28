package redistest

import (
	"context"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerCPU returns the CPU time (user + sys, INFO cpu) the server — every
// master of a cluster, summed — has used so far.
func ServerCPU(ctx context.Context, c redis.UniversalClient) (time.Duration, error) {
	var mu sync.Mutex
	var sec float64
	err := eachServer(ctx, c, func(ctx context.Context, s *redis.Client) error {
		info, err := s.InfoMap(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
			v, _ := strconv.ParseFloat(info["CPU"][k], 64)
			sec += v
		}
		return nil
	})
	return time.Duration(sec * float64(time.Second)), err
}

// SelfCPU returns the CPU time (user + sys, getrusage) of this process so
// far.
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
