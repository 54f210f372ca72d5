package journal

import "github.com/google/uuid"

// Forgotten is what the journal says about archives to a reconcile
// (ADR-070): the object keys the acts the restored database lacks
// destroyed (a purge's archive, an expungement's superseded archives), and,
// from every expungement the journal holds (re-applied already or not),
// each successor with the archive it supersedes, the archives they
// superseded, and the retention date each successor inherited where the
// entry recorded it. A successor a later act destroyed is gone from the
// store; the archives a reconcile books again descend from the last one the
// restored ledger knows, or from one an expungement superseded.
type Forgotten struct {
	Destroyed    map[string]bool
	Predecessors map[uuid.UUID]uuid.UUID
	Superseded   map[uuid.UUID]bool
	// Retention is a successor's inherited retention date, in days since
	// 1970-01-01 (nil: none, never purgeable until dated), for the
	// successors whose entry recorded it.
	Retention map[uuid.UUID]*int64
}

// Ancestor walks id's forgotten predecessors (id first) to the first
// archive known reports, and returns it; ok is false when none of them is
// known (the whole line was booked after the backup).
func (f Forgotten) Ancestor(id uuid.UUID, known func(uuid.UUID) (bool, error)) (uuid.UUID, bool, error) {
	for range len(f.Predecessors) + 1 { // a line is no longer than the map
		has, err := known(id)
		if err != nil || has {
			return id, has, err
		}
		p, ok := f.Predecessors[id]
		if !ok {
			return id, false, nil
		}
		id = p
	}
	return id, false, nil
}
