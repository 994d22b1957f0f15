package memjobs_test

import (
	"testing"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

func TestConformance(t *testing.T) {
	registrytest.Run(t, func(testing.TB) jobs.Registry { return memjobs.New() })
}
