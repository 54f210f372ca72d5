package vacuumwatch

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/craig/retention/kernel/invariants"
	"github.com/craig/retention/kernel/metrics"
)

// Limits are the watchdog's thresholds (the vacuum_* settings); a zero
// limit disables its check.
type Limits struct {
	// MaxHeld is the longest a session or prepared transaction may hold
	// the xmin horizon (vacuum_horizon_max_held).
	MaxHeld time.Duration
	// MaxSlotWALBytes is the most WAL a replication slot may retain
	// (vacuum_slot_max_retained_wal_bytes).
	MaxSlotWALBytes int64
	// MaxDeadTuples is the most dead tuples a swept table may hold
	// (vacuum_dead_tuples_max).
	MaxDeadTuples int64
}

// The label values of retention_vacuum_limit.
const (
	LimitHorizonHeldSeconds  = "horizon_held_seconds"
	LimitSlotRetainedWALByte = "slot_retained_wal_bytes"
	LimitDeadTuples          = "dead_tuples"
)

// ExportLimits sets retention_vacuum_limit from the settings (once, at
// boot: they do not change while a service runs).
func ExportLimits(m *metrics.Vacuum, l Limits) {
	m.Limit.WithLabelValues(LimitHorizonHeldSeconds).Set(l.MaxHeld.Seconds())
	m.Limit.WithLabelValues(LimitSlotRetainedWALByte).Set(float64(l.MaxSlotWALBytes))
	m.Limit.WithLabelValues(LimitDeadTuples).Set(float64(l.MaxDeadTuples))
}

// Finding kinds: why VACUUM cannot keep up with what a sweep deletes.
const (
	FindingHorizonHeld = "horizon_held" // a session or prepared transaction holds the xmin horizon too long
	FindingSlotWAL     = "slot_wal"     // a replication slot retains too much WAL
	FindingDeadTuples  = "dead_tuples"  // a swept table holds too many dead tuples
)

// Finding is one thing over its limit.
type Finding struct {
	Kind string `json:"kind"`
	// Holder is the holder kind of a horizon_held finding.
	Holder string `json:"holder,omitempty"`
	// Name is the session's pid, the prepared transaction's gid, the
	// slot's or the table's name.
	Name string `json:"name"`
	// Value and Limit are seconds held, bytes retained or dead tuples.
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	// XminAge is a horizon holder's xmin age in transactions.
	XminAge int64 `json:"xmin_age_xids,omitempty"`
}

// String says the finding in words, for the sweep report and the log.
func (f Finding) String() string {
	switch f.Kind {
	case FindingHorizonHeld:
		return fmt.Sprintf("%s %s holds the xmin horizon for %v (limit %v, %d transactions): VACUUM cannot reclaim what the sweep deletes",
			f.Holder, f.Name, seconds(f.Value), seconds(f.Limit), f.XminAge)
	case FindingSlotWAL:
		return fmt.Sprintf("replication slot %s retains %.0f bytes of WAL (limit %.0f)", f.Name, f.Value, f.Limit)
	default:
		return fmt.Sprintf("%s holds %.0f dead tuples (limit %.0f): VACUUM is not keeping up with the sweep", f.Name, f.Value, f.Limit)
	}
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Second)
}

// Findings are what the reading shows over the limits: the sessions and
// prepared transactions held longer than MaxHeld (a slot's hold has no
// age the server knows), the slots retaining more WAL than
// MaxSlotWALBytes and the tables holding more dead tuples than
// MaxDeadTuples, in that order.
func Findings(r Report, l Limits) []Finding {
	var out []Finding
	for _, h := range r.Holders {
		if l.MaxHeld > 0 && h.Kind != HolderSlot && h.HeldSeconds > l.MaxHeld.Seconds() {
			out = append(out, Finding{Kind: FindingHorizonHeld, Holder: h.Kind, Name: h.Name, Value: h.HeldSeconds, Limit: l.MaxHeld.Seconds(), XminAge: h.XminAge})
		}
	}
	for _, s := range r.Slots {
		if l.MaxSlotWALBytes > 0 && s.RetainedBytes > l.MaxSlotWALBytes {
			out = append(out, Finding{Kind: FindingSlotWAL, Name: s.Name, Value: float64(s.RetainedBytes), Limit: float64(l.MaxSlotWALBytes)})
		}
	}
	for _, table := range slices.Sorted(maps.Keys(r.DeadTuples)) {
		if n := r.DeadTuples[table]; l.MaxDeadTuples > 0 && n > l.MaxDeadTuples {
			out = append(out, Finding{Kind: FindingDeadTuples, Name: table, Value: float64(n), Limit: float64(l.MaxDeadTuples)})
		}
	}
	return out
}

// The watchdog's rows in `<svc> invariants`, after every table's.
const (
	InvariantName     = "vacuum_horizon_held"
	SlotInvariantName = "vacuum_slot_wal_retained"
)

// InvariantNames are the watchdog's invariants, in report order.
func InvariantNames() []string { return []string{InvariantName, SlotInvariantName} }

// Invariants are the vacuum watchdog as invariants: the sessions and
// prepared transactions holding the xmin horizon longer than MaxHeld, and
// the replication slots retaining more WAL than MaxSlotWALBytes. Dead
// tuples are no invariant: autovacuum reclaims them in its own time; the
// sweep report and the alert watch them.
func Invariants(r Report, l Limits) []invariants.Result {
	held := invariants.Result{Name: InvariantName, Table: "(database)", HeldThresholdSeconds: l.MaxHeld.Seconds(), Disabled: l.MaxHeld <= 0,
		Description: fmt.Sprintf("sessions and prepared transactions holding the xmin horizon (VACUUM cannot reclaim what the sweeps delete) for over %v", l.MaxHeld)}
	slot := invariants.Result{Name: SlotInvariantName, Table: "(server)", WALThresholdBytes: l.MaxSlotWALBytes, Disabled: l.MaxSlotWALBytes <= 0,
		Description: fmt.Sprintf("replication slots retaining over %d bytes of WAL (a consumer down or gone; the primary's disk fills)", l.MaxSlotWALBytes)}
	for _, f := range Findings(r, Limits{MaxHeld: l.MaxHeld, MaxSlotWALBytes: l.MaxSlotWALBytes}) {
		res := &held
		if f.Kind == FindingSlotWAL {
			res = &slot
		}
		res.Violations++
		if f.Kind == FindingHorizonHeld && (res.OldestAgeSeconds == nil || f.Value > *res.OldestAgeSeconds) {
			v := f.Value
			res.OldestAgeSeconds = &v
		}
	}
	return []invariants.Result{held, slot}
}
