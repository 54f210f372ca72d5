// Package vacuumwatch watches what keeps VACUUM from reclaiming the rows the
// sweeps delete: a session holding an old snapshot, a forgotten prepared
// transaction, a replication slot's xmin (or a standby's feedback), the WAL
// slots retain, and the dead tuples of the swept tables. A sweep that
// deletes what VACUUM cannot reclaim only grows the table's bloat.
//
// It reads catalog views only and changes nothing.
package vacuumwatch

import (
	"context"
	"fmt"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/metrics"
)

// Holder kinds: the label values of retention_vacuum_horizon_age_xids.
const (
	HolderBackend  = "backend"  // a session (or a standby's feedback through its WAL sender)
	HolderPrepared = "prepared" // a prepared transaction
	HolderSlot     = "slot"     // a replication slot's xmin or catalog_xmin
)

// Holders are every holder kind, exported from boot at 0.
func Holders() []string { return []string{HolderBackend, HolderPrepared, HolderSlot} }

// Holder is one thing holding back the database's xmin horizon.
type Holder struct {
	Kind string // HolderBackend, HolderPrepared or HolderSlot
	// Name is the session's pid, the prepared transaction's gid or the
	// slot's name.
	Name string
	// XminAge is how many transactions ago its xmin was taken: VACUUM
	// cannot reclaim a row deleted after it.
	XminAge int64
	// HeldSeconds is how long it has been held, from its transaction's
	// start (0 for a slot: the server does not know).
	HeldSeconds float64
	// Hidden is true for a session whose times the service's role may
	// not see (another role's, without pg_monitor): its HeldSeconds is 0
	// whatever it really is.
	Hidden bool
}

// Slot is one replication slot's retained WAL.
type Slot struct {
	Name, Type    string
	Active        bool
	RetainedBytes int64
}

// Report is one reading of a database.
type Report struct {
	// Holders, oldest xmin first.
	Holders []Holder
	Slots   []Slot
	// DeadTuples and LiveTuples of each watched table the statistics know.
	DeadTuples, LiveTuples map[string]int64
}

// LongestHeld is, per holder kind, the longest any holder of it has held
// its xmin, in seconds (absent: none).
func (r Report) LongestHeld() map[string]float64 {
	out := map[string]float64{}
	for _, h := range r.Holders {
		out[h.Kind] = max(out[h.Kind], h.HeldSeconds)
	}
	return out
}

// Oldest is the oldest holder of each kind (absent: none holds an xmin).
func (r Report) Oldest() map[string]Holder {
	out := map[string]Holder{}
	for _, h := range r.Holders {
		if o, ok := out[h.Kind]; !ok || h.XminAge > o.XminAge {
			out[h.Kind] = h
		}
	}
	return out
}

// Read reads the database db is connected to; tables are the swept tables
// whose dead tuples are reported.
func Read(ctx context.Context, db queries.DBTX, tables []string) (Report, error) {
	q := queries.New(db)
	holders, err := q.VacuumHorizonHolders(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("vacuumwatch: read the xmin holders: %w", err)
	}
	slots, err := q.SlotRetainedWAL(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("vacuumwatch: read the replication slots: %w", err)
	}
	dead, err := q.DeadTuples(ctx, tables)
	if err != nil {
		return Report{}, fmt.Errorf("vacuumwatch: read dead tuples: %w", err)
	}
	r := Report{DeadTuples: map[string]int64{}, LiveTuples: map[string]int64{}}
	for _, h := range holders {
		r.Holders = append(r.Holders, Holder{Kind: h.Holder, Name: h.Name, XminAge: h.XminAge, HeldSeconds: h.HeldSeconds, Hidden: !h.HeldKnown})
	}
	for _, s := range slots {
		r.Slots = append(r.Slots, Slot{Name: s.SlotName, Type: s.SlotType, Active: s.Active != nil && *s.Active, RetainedBytes: s.RetainedBytes})
	}
	for _, d := range dead {
		r.DeadTuples[d.TableName], r.LiveTuples[d.TableName] = d.Dead, d.Live
	}
	return r, nil
}

// Export sets the vacuum gauges from a reading: the oldest xmin age and the
// longest hold of each holder kind (0 when none holds one), each slot's retained WAL (a dropped
// slot's series removed) and each table's dead tuples.
func Export(m *metrics.Vacuum, r Report) {
	oldest, held := r.Oldest(), r.LongestHeld()
	for _, kind := range Holders() {
		m.HorizonAge.WithLabelValues(kind).Set(float64(oldest[kind].XminAge))
		m.HorizonHeld.WithLabelValues(kind).Set(held[kind])
	}
	var names []string
	for _, s := range r.Slots {
		names = append(names, s.Name)
		m.SlotRetainedWAL.WithLabelValues(s.Name).Set(float64(s.RetainedBytes))
	}
	m.ForgetSlotsExcept(names)
	for table, n := range r.DeadTuples {
		m.DeadTuples.WithLabelValues(table).Set(float64(n))
	}
}

// Hidden are the holders whose hold times the reading could not see.
func (r Report) Hidden() []Holder {
	var out []Holder
	for _, h := range r.Holders {
		if h.Hidden {
			out = append(out, h)
		}
	}
	return out
}

// ForgetHorizon clears what a replica last read of the database (it ran no
// sweep group this cycle, so its reading is stale): the horizon gauges
// back to 0, the slots' series removed. The replica that ran exports the
// fresh reading.
func ForgetHorizon(m *metrics.Vacuum) {
	for _, kind := range Holders() {
		m.HorizonAge.WithLabelValues(kind).Set(0)
		m.HorizonHeld.WithLabelValues(kind).Set(0)
	}
	m.ForgetSlotsExcept(nil)
}

// ForgetTables removes the dead-tuple series of tables a replica did not
// sweep this cycle.
func ForgetTables(m *metrics.Vacuum, tables []string) {
	for _, t := range tables {
		m.DeadTuples.DeleteLabelValues(t)
	}
}
