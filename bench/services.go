package bench

import (
	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
)

// The archived tables the scenarios seed and measure. The benchmark reaches
// the services only through their specs (app.Spec), as any team would: the
// tables' settings, selection and bookkeeping are the registered ones.
const (
	evaluationsTable = "rule_evaluations" // rules
	auditLogTable    = "audit_log"        // security
)

// archiveSettings are a service's archive settings at its defaults.
func archiveSettings[T any](spec app.Spec[T]) archive.Settings {
	return spec.Archive.Settings(spec.Defaults)
}
