//go:build scratch

package security_test

import (
	"testing"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/services/security"
)

// TestConformance runs the kernel's per-service suite over every table the
// security service registers (today the transport tables).
func TestConformance(t *testing.T) {
	t.Parallel()
	s := security.DefaultSettings()
	kerneltest.CheckSpec(t, kerneltest.Tables{Service: security.Name, Groups: app.Groups(security.Spec(), s)},
		kerneltest.TransportSeeds(s.EventOutboxRetentionDays, s.EventInboxRetentionDays))
}
