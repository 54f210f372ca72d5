package lifecycle

import (
	"context"
	"fmt"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
)

// MaxHoldSubjects bounds the subjects one hold names.
const MaxHoldSubjects = 1000

// subjectHashes parses the subjects a hold names and returns their keyed
// hashes (none: nil). A malformed subject is ErrInvalid (the error never
// repeats it); subjects with no key configured are ErrNoSubjectKey.
func (m *Manager) subjectHashes(subjects []string) ([][]byte, error) {
	if len(subjects) == 0 {
		return [][]byte{}, nil
	}
	if !m.cfg.SubjectKey.Valid() {
		return nil, ErrNoSubjectKey
	}
	out := make([][]byte, 0, len(subjects))
	seen := map[string]bool{}
	for i, raw := range subjects {
		s, err := subject.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: subjects[%d]: %w", ErrInvalid, i, err)
		}
		if seen[s.String()] {
			continue
		}
		seen[s.String()] = true
		out = append(out, m.cfg.SubjectKey.Hash(s))
	}
	return out, nil
}

// checkIndexed refuses a subject hold while an archive of a table with
// subjects is not yet indexed: it could not tell which of them hold the
// subject, so it would hold them all.
func (m *Manager) checkIndexed(ctx context.Context, q *queries.Queries, hashes [][]byte) error {
	if len(hashes) == 0 {
		return nil
	}
	n, err := q.CountUnindexed(ctx, m.cfg.SubjectTables)
	if err != nil {
		return fmt.Errorf("count unindexed archives: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %d archives; run `%s archive index-subjects` until it reports none left", ErrNotIndexed, n, m.cfg.Service)
	}
	return nil
}

// subjectDetail adds a subject hold's hashes and, per archive it covers,
// whether a subject hold still covers it (the fleet ledger's
// subject_hold) to an event's detail.
func subjectDetail(ctx context.Context, q *queries.Queries, detail map[string]any, hashes [][]byte) error {
	if len(hashes) == 0 {
		return nil
	}
	detail["subject_hashes"] = hexes(hashes)
	rows, err := q.SubjectHolds(ctx, queries.SubjectHoldsParams{Ids: nil, Hashes: hashes})
	if err != nil {
		return fmt.Errorf("subject holds: %w", err)
	}
	held := make(map[string]bool, len(rows))
	for _, r := range rows {
		held[uuid.UUID(r.ArchiveID.Bytes).String()] = r.SubjectHeld
	}
	detail["subject_hold"] = held
	return nil
}

// hexes spells keyed hashes as the API and the events do.
func hexes(hs [][]byte) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = subject.Hex(h)
	}
	return out
}
