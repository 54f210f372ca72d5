package journal

import "github.com/google/uuid"

// Forgotten is what the store's entries a restored database lacks say
// about archives (ADR-070): the object keys their acts destroyed (a
// purge's archive, an expungement's superseded archives) and each
// expungement successor they name, with the archive it supersedes. A
// successor a later forgotten act destroyed is gone from the store, and
// the archives a reconcile books again descend from the last one the
// restored ledger knows.
type Forgotten struct {
	Destroyed    map[string]bool
	Predecessors map[uuid.UUID]uuid.UUID
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
