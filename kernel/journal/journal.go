// Package journal keeps a second record of every act that destroys, seals,
// holds or releases, where a database restore cannot reach it (ADR-070).
// Each act appends an entry to the service database's journal in its own
// transaction (Append) and, before it reports success, writes the entry as
// a create-only object retention-archives/<service>/journal/<seq>.json in
// the store (Publish). Compare tells whether the store holds entries the
// database lacks: the database was restored from before those acts, and
// until `<service> reconcile` has re-applied them (Adopt records each), the
// service refuses destructive work and reads (Gate).
//
// Entries never hold a case number in clear: subjects are keyed hashes or
// sealed under the subject key by the caller.
package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Act names a journaled act (retention_journal.act).
type Act string

// The journaled acts.
const (
	ActSeal         Act = "seal"
	ActUnseal       Act = "unseal"
	ActHoldPlaced   Act = "hold_placed"
	ActHoldReleased Act = "hold_released"
	ActPurge        Act = "purge"
	ActExpunge      Act = "expunge"
	// ActScheduleApproved: a records schedule version put in force
	// (ADR-073); a restore must not bring an older version back.
	ActScheduleApproved Act = "schedule_approved"
	// ActCaseEvent: a case clock moved (ADR-073); a restore must not
	// forget a reopening.
	ActCaseEvent Act = "case_event"
	// ActDisposition: a disposition batch executed (ADR-073); a restore
	// must not bring its rows back.
	ActDisposition Act = "disposition"
	// ActDispositionRejected: a batch rejected (ADR-073), with the
	// extension that keeps its cases until a day; a restore must not
	// make them due again.
	ActDispositionRejected Act = "disposition_rejected"
)

// Format identifies an entry object's layout.
const Format = "craig-retention-journal/1"

// Entry is one journaled act, as the database and the store keep it.
type Entry struct {
	Format  string          `json:"format"`
	Service string          `json:"service"`
	Seq     int64           `json:"seq"`
	Act     Act             `json:"act"`
	Detail  json.RawMessage `json:"detail"`
	Actor   string          `json:"actor"`
	// At is when the act committed, for people; AtMicros is the same
	// instant as microseconds since the Unix epoch, which is what is read
	// back (no time makes a round trip through text).
	At       string `json:"at"`
	AtMicros int64  `json:"at_us"`
}

// Time is the entry's instant.
func (e Entry) Time() time.Time { return time.UnixMicro(e.AtMicros).UTC() }

// ErrDiverged: the store holds another act under a sequence number the
// database just used: the database was restored from before the store's
// entries and has acted since. Nothing may be done until an operator has
// reconciled (the runbook's "After restoring a database").
var ErrDiverged = errors.New("journal: the store holds another act under this sequence number (the database was restored behind the store's journal)")

// ErrNotStored: the act is done and recorded in the database, but its store
// copy could not be written yet; the next act, verify, boot or a retry of
// the call writes it.
var ErrNotStored = errors.New("journal: the act is done; its copy in the store could not be written yet")

// ErrBehind: the store's journal is ahead of the database's
// (restored_behind_journal): destructive work and reads are refused until
// `<service> reconcile`.
var ErrBehind = errors.New("journal: the database is behind the store's journal (restored from a backup): run `reconcile`")

// Append records act in the database journal, in the act's transaction
// tx (appends are serialized by lease.JournalKey until tx ends).
func Append(ctx context.Context, tx pgx.Tx, act Act, detail any, actor string) error {
	doc, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("journal %s: %w", act, err)
	}
	q := queries.New(tx)
	if err := q.LockJournal(ctx, lease.JournalKey); err != nil {
		return fmt.Errorf("journal %s: order appends: %w", act, err)
	}
	if _, err := q.AppendJournal(ctx, queries.AppendJournalParams{Act: string(act), Detail: doc, Actor: actor}); err != nil {
		return fmt.Errorf("journal %s: %w", act, err)
	}
	return nil
}

// Journal is one service's journal in its database and its store.
type Journal struct {
	pool    *pgxpool.Pool
	store   *store.Store
	service string
	gate    *Gate
}

// New returns the service's journal. gate, when not nil, is set by every
// Compare.
func New(pool *pgxpool.Pool, st *store.Store, service string, gate *Gate) *Journal {
	return &Journal{pool: pool, store: st, service: service, gate: gate}
}

// Prefix is the store prefix of a service's journal objects.
func Prefix(service string) string { return store.Prefix + service + "/journal/" }

// Key is the store key of entry seq.
func Key(service string, seq int64) string { return fmt.Sprintf("%s%020d.json", Prefix(service), seq) }

// Publish writes every database entry not yet in the store, create-only,
// in sequence order. An object already there with the entry's own act and
// detail counts as written (a crash between the PUT and the mark); one
// with another act is ErrDiverged. It returns how many it wrote.
func (j *Journal) Publish(ctx context.Context) (int, error) {
	if j == nil {
		return 0, nil
	}
	q := queries.New(j.pool)
	rows, err := q.UnstoredJournal(ctx)
	if err != nil {
		return 0, fmt.Errorf("journal: unstored entries: %w", err)
	}
	n := 0
	for _, r := range rows {
		e := Entry{Format: Format, Service: j.service, Seq: r.Seq, Act: Act(r.Act), Detail: r.Detail, Actor: r.Actor,
			At: r.At.Time.UTC().Format(time.RFC3339Nano), AtMicros: r.At.Time.UnixMicro()}
		body, err := json.MarshalIndent(e, "", "  ")
		if err != nil {
			return n, err
		}
		key := Key(j.service, r.Seq)
		err = j.store.PutCreate(ctx, key, body, store.ContentTypeJSON)
		if errors.Is(err, store.ErrAlreadyExists) {
			err = j.same(ctx, e)
		}
		if errors.Is(err, ErrDiverged) {
			_, _ = j.Compare(ctx) // shut the gate: the store is ahead
		}
		if err != nil {
			return n, fmt.Errorf("journal: entry %d: %w", r.Seq, err)
		}
		if err := q.MarkJournalStored(ctx, r.Seq); err != nil {
			return n, fmt.Errorf("journal: mark entry %d stored: %w", r.Seq, err)
		}
		n++
	}
	return n, nil
}

// same checks that the stored entry of e.Seq is e's act (ErrDiverged
// otherwise).
func (j *Journal) same(ctx context.Context, e Entry) error {
	got, err := j.Read(ctx, e.Seq)
	if err != nil {
		return err
	}
	if got.Act != e.Act || !jsonEqual(got.Detail, e.Detail) || got.Actor != e.Actor {
		return fmt.Errorf("%w: entry %d is %s in the store, %s in the database", ErrDiverged, e.Seq, got.Act, e.Act)
	}
	return nil
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ax, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return bytes.Equal(ax, by)
}

// Read reads the store's entry seq: its first version (one written over
// it, or a delete marker on top, does not change what was journaled).
func (j *Journal) Read(ctx context.Context, seq int64) (Entry, error) {
	b, err := j.store.GetFirstVersion(ctx, Key(j.service, seq)) // written create-only: the first version is the act
	if err != nil {
		return Entry{}, fmt.Errorf("journal: read entry %d: %w", seq, err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil || e.Format != Format || e.Seq != seq || e.Service != j.service {
		return Entry{}, fmt.Errorf("journal: entry %d in the store is not a %s entry of %s", seq, Format, j.service)
	}
	return e, nil
}

// Details are the details of the database's entries of act, by sequence
// number: the acts it holds (applied, or re-applied and adopted).
func (j *Journal) Details(ctx context.Context, act Act) (map[int64]json.RawMessage, error) {
	rows, err := queries.New(j.pool).JournalDetails(ctx, string(act))
	if err != nil {
		return nil, fmt.Errorf("journal: the database's %s entries: %w", act, err)
	}
	out := make(map[int64]json.RawMessage, len(rows))
	for _, r := range rows {
		out[r.Seq] = r.Detail
	}
	return out, nil
}

// State is how the database's journal compares with the store's.
type State struct {
	// DatabaseSeq and StoreSeq are each side's highest sequence number.
	DatabaseSeq int64 `json:"database_seq"`
	StoreSeq    int64 `json:"store_seq"`
	// Missing are the store's entries the database lacks, in order: the
	// acts a restore forgot.
	Missing []int64 `json:"missing"`
	// Gaps are sequence numbers below the store's highest that neither
	// side has: an entry destroyed in the store and forgotten by a
	// restore. Nothing can re-apply it; it is refused until an operator
	// has decided (ADR-070).
	Gaps []int64 `json:"gaps"`
}

// Behind reports whether the database lacks entries the store holds, or
// an entry is lost from both.
func (s State) Behind() bool { return len(s.Missing) > 0 || len(s.Gaps) > 0 }

// Compare lists the store's entries and the database's, and sets the gate.
func (j *Journal) Compare(ctx context.Context) (State, error) {
	objs, err := j.store.ListAllObjects(ctx, Prefix(j.service)) // behind a delete marker too
	if err != nil {
		return State{}, fmt.Errorf("journal: list the store's entries: %w", err)
	}
	stored := make([]int64, 0, len(objs))
	for _, o := range objs {
		name := strings.TrimSuffix(strings.TrimPrefix(o.Key, Prefix(j.service)), ".json")
		seq, err := strconv.ParseInt(name, 10, 64)
		if err != nil || seq < 1 || Key(j.service, seq) != o.Key {
			continue // not an entry (a stray object is not an act)
		}
		stored = append(stored, seq)
	}
	sort.Slice(stored, func(a, b int) bool { return stored[a] < stored[b] })
	q := queries.New(j.pool)
	st := State{Missing: []int64{}, Gaps: []int64{}}
	if st.DatabaseSeq, err = q.JournalMax(ctx); err != nil {
		return State{}, fmt.Errorf("journal: the database's entries: %w", err)
	}
	have, err := q.JournalSeqs(ctx, 0)
	if err != nil {
		return State{}, fmt.Errorf("journal: the database's entries: %w", err)
	}
	in := make(map[int64]bool, len(have))
	for _, s := range have {
		in[s] = true
	}
	inStore := make(map[int64]bool, len(stored))
	for _, s := range stored {
		inStore[s] = true
		st.StoreSeq = max(st.StoreSeq, s)
		if !in[s] {
			st.Missing = append(st.Missing, s)
		}
	}
	for s := int64(1); s < st.StoreSeq && len(st.Gaps) < maxGaps; s++ {
		if !inStore[s] && !in[s] {
			st.Gaps = append(st.Gaps, s)
		}
	}
	j.gate.Set(st)
	return st, nil
}

// maxGaps bounds the gaps a State lists (one is enough to refuse).
const maxGaps = 100

// Adopt records the store's entry e in the database journal, in the
// transaction that re-applied it; adopting it twice changes nothing.
func Adopt(ctx context.Context, tx pgx.Tx, e Entry) error {
	_, err := queries.New(tx).AdoptJournal(ctx, queries.AdoptJournalParams{Seq: e.Seq, Act: string(e.Act), Detail: e.Detail, Actor: e.Actor,
		At: pgtype.Timestamptz{Time: e.Time(), Valid: true}})
	if err != nil {
		return fmt.Errorf("journal: adopt entry %d: %w", e.Seq, err)
	}
	return nil
}

// Gate is what a service's work asks before it destroys or reads: whether
// the last comparison found the database behind the store's journal.
type Gate struct {
	mu    sync.Mutex
	state State
}

// Set records a comparison's outcome (a nil gate ignores it).
func (g *Gate) Set(s State) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state = s
}

// Err is ErrBehind (naming the missing entries) while the database is
// behind; nil otherwise, and for a nil gate.
func (g *Gate) Err() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.state.Behind() {
		return nil
	}
	if len(g.state.Missing) == 0 {
		return fmt.Errorf("%w: journal entries %v are in neither the store nor the database", ErrBehind, g.state.Gaps)
	}
	err := fmt.Errorf("%w: %d act(s) the store journaled are not in the database (entries %d..%d)", ErrBehind,
		len(g.state.Missing), g.state.Missing[0], g.state.Missing[len(g.state.Missing)-1])
	if len(g.state.Gaps) > 0 {
		err = fmt.Errorf("%w, and entries %v are in neither", err, g.state.Gaps)
	}
	return err
}

// State is the last comparison's outcome.
func (g *Gate) State() State {
	if g == nil {
		return State{Missing: []int64{}, Gaps: []int64{}}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// Err is the gate's error (ErrBehind while the database is behind the
// store's journal); nil for a nil journal.
func (j *Journal) Err() error {
	if j == nil {
		return nil
	}
	return j.gate.Err()
}

// Done publishes the acts just committed: nil when the store has them,
// ErrNotStored (wrapping why) when it does not yet.
func (j *Journal) Done(ctx context.Context) error {
	if _, err := j.Publish(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrNotStored, err)
	}
	return nil
}

// ErrUnchecked: an act could not tell whether the database is behind the
// store's journal (the store or the database did not answer): it is
// refused, as it would be while behind.
var ErrUnchecked = errors.New("journal: cannot tell whether the database is behind the store's journal")

// Check is what an act asks before it acts: the gate's error, or, when the
// gate is open, whether the store holds the entry the database would take
// next (one read of each): a database restored since the last comparison
// is caught before it destroys or forgets anything, and the gate is shut.
// A check that cannot be made refuses the act (ErrUnchecked). Nil for a
// nil journal.
func (j *Journal) Check(ctx context.Context) error {
	if j == nil {
		return nil
	}
	if err := j.gate.Err(); err != nil {
		return err
	}
	next, err := queries.New(j.pool).JournalMax(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnchecked, err)
	}
	n, err := j.store.VersionCount(ctx, Key(j.service, next+1))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnchecked, err)
	}
	if n == 0 {
		return nil
	}
	if _, err := j.Compare(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrUnchecked, err)
	}
	if err := j.gate.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: the store holds entry %d the database has not taken", ErrBehind, next+1)
}
