// Package reconcile re-applies, after a database restore, every act the
// store's journal holds and the database lacks (ADR-070): `<service>
// reconcile` runs it, and the lifecycle model test drives the same code.
package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/schedule"
	"github.com/google/uuid"
)

// Report is what a reconcile did.
type Report struct {
	Before    journal.State       `json:"before"`
	Reapplied []Reapplied         `json:"reapplied"`
	After     journal.State       `json:"after"`
	Published int                 `json:"published"`
	Acts      map[journal.Act]int `json:"acts"`
	// Copies are the unknown archive objects checked, and those destroyed
	// as copies of rows held elsewhere (archiveread.PutBackCopies before
	// the acts are re-applied, archiveread.DestroyCopies after).
	Copies archiveread.GCReport `json:"copies"`
}

// Reapplied is one journal entry re-applied.
type Reapplied struct {
	Seq int64       `json:"seq"`
	Act journal.Act `json:"act"`
}

// Reconciler holds what a reconcile acts through, all on the restored
// database and the service's store.
type Reconciler struct {
	Journal   *journal.Journal
	Lifecycle *lifecycle.Manager
	Orders    *courtorder.Orders
	// Schedules and Clocks re-apply the records schedule's approvals and
	// the case events (ADR-073).
	Schedules *schedule.Schedules
	Clocks    *schedule.Clocks
	// Dispositions re-applies executed disposition batches (ADR-073): it
	// needs its execution (the court orders' rewrite) set.
	Dispositions *disposition.Finder
	// Reader, when set, destroys the unknown objects that copy rows held
	// elsewhere (see Run).
	Reader *archiveread.Reader
	Logger *slog.Logger
	// Actor is who the copies' destruction is recorded under.
	Actor string
}

// destroyedDetail is what a purge's, an expungement's or a disposition
// batch's entry says it destroyed and wrote (lifecycle's purge entry,
// courtorder's expunge entry, disposition's entry).
type destroyedDetail struct {
	DataKey     string `json:"data_key"`
	ManifestKey string `json:"manifest_key"`
	Archives    []struct {
		ArchiveID   uuid.UUID  `json:"archive_id"`
		DataKey     string     `json:"data_key"`
		ManifestKey string     `json:"manifest_key"`
		SuccessorID *uuid.UUID `json:"successor_id"`
		Retention   *struct {
			UntilDays *int64 `json:"until_days"`
		} `json:"retention"`
	} `json:"archives"`
}

// forgotten is what the missing entries' acts destroyed, and what every
// expungement of the journal (the database's and the missing ones) wrote.
func (r Reconciler) forgotten(ctx context.Context, missing []int64) (journal.Forgotten, error) {
	f := journal.Forgotten{Destroyed: map[string]bool{}, Predecessors: map[uuid.UUID]uuid.UUID{}, Superseded: map[uuid.UUID]bool{},
		Retention: map[uuid.UUID]*int64{}}
	lineage := func(seq int64, raw []byte, destroyed bool) error {
		var d destroyedDetail
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("journal entry %d: %w", seq, err)
		}
		if destroyed {
			for _, k := range []string{d.DataKey, d.ManifestKey} {
				if k != "" {
					f.Destroyed[k] = true
				}
			}
		}
		for _, a := range d.Archives {
			if destroyed {
				f.Destroyed[a.DataKey], f.Destroyed[a.ManifestKey] = true, true
			}
			f.Superseded[a.ArchiveID] = true
			if a.SuccessorID != nil {
				f.Predecessors[*a.SuccessorID] = a.ArchiveID
				if a.Retention != nil {
					f.Retention[*a.SuccessorID] = a.Retention.UntilDays
				}
			}
		}
		return nil
	}
	for _, act := range []journal.Act{journal.ActExpunge, journal.ActDisposition} {
		applied, err := r.Journal.Details(ctx, act)
		if err != nil {
			return f, err
		}
		for seq, raw := range applied {
			if err := lineage(seq, raw, false); err != nil {
				return f, err
			}
		}
	}
	for _, seq := range missing {
		e, err := r.Journal.Read(ctx, seq)
		if err != nil {
			return f, err
		}
		if e.Act != journal.ActPurge && e.Act != journal.ActExpunge && e.Act != journal.ActDisposition {
			continue
		}
		if err := lineage(seq, e.Detail, true); err != nil {
			return f, fmt.Errorf("%w (%s)", err, e.Act)
		}
	}
	return f, nil
}

// reapply re-applies one entry by whoever journaled its act.
func (r Reconciler) reapply(ctx context.Context, e journal.Entry, forgotten journal.Forgotten) error {
	switch e.Act {
	case journal.ActSeal, journal.ActUnseal, journal.ActExpunge:
		return r.Orders.Reapply(ctx, e, forgotten)
	case journal.ActScheduleApproved:
		return r.Schedules.Reapply(ctx, e)
	case journal.ActCaseEvent:
		return r.Clocks.Reapply(ctx, e)
	case journal.ActDisposition, journal.ActDispositionRejected:
		if r.Dispositions == nil {
			return fmt.Errorf("journal entry %d: a disposition batch is re-applied with the service's schedule, store and subject key", e.Seq)
		}
		return r.Dispositions.Reapply(ctx, e, forgotten)
	default:
		return r.Lifecycle.Reapply(ctx, e)
	}
}

// Run re-applies the store's entries the database lacks, in order, each in
// its own transaction with its entry adopted, so running it again changes
// nothing. It refuses, re-applying nothing, when an entry is in neither
// journal (a gap). Before the first entry (also with none missing: an
// expungement refused to go on while one holds rows in no other place),
// every unknown pass archive has the rows its hot table lacks put back
// (rows written after the backup) and goes (an archive booked after the
// backup, an upload whose intent the restore forgot), so no copy of a case
// an expungement below removes again is left, except the objects the
// missing entries destroyed (a purge, an expungement), whose versions left
// go with nothing put back. A successor a missing entry names is left for
// its entry to book again (one a later missing entry destroyed is not
// booked: its own successor descends from the archive it superseded).
// After the last entry, every unknown expungement successor goes (an
// order's try the journal does not know). Then the database's entries the
// store lacks are published.
func (r Reconciler) Run(ctx context.Context) (Report, error) {
	rep := Report{Reapplied: []Reapplied{}, Acts: map[journal.Act]int{}, Copies: archiveread.GCReport{Orphans: []string{}, Deleted: []string{}}}
	var err error
	if rep.Before, err = r.Journal.Compare(ctx); err != nil {
		return rep, err
	}
	if len(rep.Before.Gaps) > 0 {
		return rep, fmt.Errorf("journal entries %v are in neither the store nor the database: an act's record was destroyed, and nothing can re-apply it; "+
			"compare the lifecycle log and the certificates with the store before deciding (ADR-070); nothing was re-applied", rep.Before.Gaps)
	}
	forgotten, err := r.forgotten(ctx, rep.Before.Missing)
	if err != nil {
		return rep, err
	}
	if r.Reader != nil {
		if rep.Copies, err = r.Reader.PutBackCopies(ctx, r.Actor, forgotten); err != nil {
			return rep, fmt.Errorf("destroy copies of hot rows: %w", err)
		}
	}
	for _, seq := range rep.Before.Missing {
		e, err := r.Journal.Read(ctx, seq)
		if err != nil {
			return rep, err
		}
		if err := r.reapply(ctx, e, forgotten); err != nil {
			return rep, fmt.Errorf("reconcile stopped at entry %d (%s); what came before is re-applied, run it again once the cause is fixed: %w", seq, e.Act, err)
		}
		rep.Reapplied = append(rep.Reapplied, Reapplied{Seq: seq, Act: e.Act})
		rep.Acts[e.Act]++
		r.Logger.InfoContext(ctx, "journal entry re-applied", slog.Int64("seq", seq), slog.String("act", string(e.Act)), slog.String("actor", e.Actor))
	}
	if r.Reader != nil {
		after, err := r.Reader.DestroyCopies(ctx, r.Actor)
		if err != nil {
			return rep, fmt.Errorf("destroy copies left by unjournaled order tries: %w", err)
		}
		rep.Copies.Deleted = append(rep.Copies.Deleted, after.Deleted...)
	}
	if rep.After, err = r.Journal.Compare(ctx); err != nil {
		return rep, err
	}
	if !rep.After.Behind() {
		if rep.Published, err = r.Journal.Publish(ctx); err != nil {
			return rep, err
		}
	}
	return rep, nil
}
