package fleet

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Lifecycle event kinds (the part after "<service>."): what a producer's
// archive lifecycle did to its own archives, applied to their fleet rows.
const (
	KindRetentionSet = "archive_retention_set"
	KindHoldPlaced   = "archive_hold_placed"
	KindHoldReleased = "archive_hold_released"
	KindPurged       = "archive_purged"
	// KindSuperseded: archives an expungement rewrote (ADR-067): each
	// destroyed, its rows other than the subject's in its successor.
	KindSuperseded = "archive_superseded"
)

// maxLifecycleIDs bounds the archives one lifecycle event may name.
const maxLifecycleIDs = 10_000

// sourceServices maps a producer's event-type prefix to its source.
var sourceServices = map[string]string{"rules": "craig-rules", "security": "craig-security"}

// LifecycleKind splits a lifecycle event type into its source service and
// kind; ok is false for any other event.
func LifecycleKind(eventType string) (source, kind string, ok bool) {
	service, kind, found := strings.Cut(eventType, ".")
	source, known := sourceServices[service]
	switch kind {
	case KindRetentionSet, KindHoldPlaced, KindHoldReleased, KindPurged, KindSuperseded:
		return source, kind, found && known
	}
	return "", "", false
}

// Change is a validated lifecycle event: what to apply to the fleet rows of
// SourceService.
type Change struct {
	SourceService string
	Kind          string
	Actor         string
	At            time.Time
	// RetentionSet: the archive and its new date.
	ArchiveID      uuid.UUID
	RetentionUntil time.Time
	// HoldPlaced / HoldReleased: archive → held.
	LegalHold map[uuid.UUID]bool
	// HoldPlaced / HoldReleased: archive → whether a subject hold covers it
	// (ADR-066; absent from events of holds that name no subject).
	SubjectHold map[uuid.UUID]bool
	// Purged: the archives destroyed; PurgedBy the identity whose call
	// destroyed them (the approver of a dual-controlled purge, else the
	// requester).
	Purged   []uuid.UUID
	PurgedBy string
	// Superseded: the order, and each archive's successor (nil: none).
	ExpungeID    uuid.UUID
	SupersededBy map[uuid.UUID]*uuid.UUID
}

// IDs are the archives the change names.
func (c Change) IDs() []uuid.UUID {
	switch {
	case c.Kind == KindRetentionSet:
		return []uuid.UUID{c.ArchiveID}
	case c.LegalHold != nil:
		ids := make([]uuid.UUID, 0, len(c.LegalHold)+len(c.SubjectHold))
		for id := range c.LegalHold {
			ids = append(ids, id)
		}
		for id := range c.SubjectHold {
			if _, dup := c.LegalHold[id]; !dup {
				ids = append(ids, id)
			}
		}
		return ids
	}
	return c.Purged
}

// lifecyclePayload is the part of a lifecycle event the fleet reads.
type lifecyclePayload struct {
	Actor          string             `json:"actor"`
	At             string             `json:"at"`
	ArchiveID      string             `json:"archive_id"`
	RetentionUntil string             `json:"retention_until"`
	LegalHold      map[string]bool    `json:"legal_hold"`
	SubjectHold    map[string]bool    `json:"subject_hold"`
	ArchiveIDs     []string           `json:"archive_ids"`
	Approver       *string            `json:"approver"`
	ExpungeID      string             `json:"expunge_id"`
	SupersededBy   map[string]*string `json:"superseded_by"`
}

// ValidateLifecycle checks a lifecycle event at time now: its source is
// known, its actor and time sane, every id canonical, its date a date; a
// *Refusal otherwise. It writes nothing.
func ValidateLifecycle(eventType string, body []byte, now time.Time) (Change, error) {
	source, kind, ok := LifecycleKind(eventType)
	if !ok {
		return Change{}, refuse(ReasonEventType, "event type %q is not a lifecycle event of a known source", eventType)
	}
	var p lifecyclePayload
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&p); err != nil {
		return Change{}, refuse(ReasonMalformed, "payload does not decode: %v", err)
	}
	c := Change{SourceService: source, Kind: kind, Actor: p.Actor}
	var err error
	if strings.TrimSpace(p.Actor) == "" {
		return Change{}, refuse(ReasonArchivedBy, "actor must be non-empty")
	}
	if c.At, err = time.Parse(time.RFC3339Nano, p.At); err != nil || c.At.After(now.Add(ClockSkew)) {
		return Change{}, refuse(ReasonTimestamps, "at %q must be an RFC 3339 time no later than now + %s", p.At, ClockSkew)
	}
	switch kind {
	case KindRetentionSet:
		if c.ArchiveID, err = parseID(p.ArchiveID); err != nil {
			return Change{}, refuse(ReasonArchiveID, "archive_id: %v", err)
		}
		if c.RetentionUntil, err = time.Parse(time.DateOnly, p.RetentionUntil); err != nil {
			return Change{}, refuse(ReasonTimestamps, "retention_until %q is not a YYYY-MM-DD date", p.RetentionUntil)
		}
	case KindHoldPlaced, KindHoldReleased:
		if c.LegalHold, err = heldMap("legal_hold", p.LegalHold); err != nil {
			return Change{}, err
		}
		if c.SubjectHold, err = heldMap("subject_hold", p.SubjectHold); err != nil {
			return Change{}, err
		}
	case KindSuperseded:
		if err := c.superseded(p); err != nil {
			return Change{}, err
		}
		fallthrough
	case KindPurged:
		if len(p.ArchiveIDs) > maxLifecycleIDs {
			return Change{}, refuse(ReasonRecordCount, "archive_ids names %d archives, at most %d", len(p.ArchiveIDs), maxLifecycleIDs)
		}
		for _, s := range p.ArchiveIDs {
			id, err := parseID(s)
			if err != nil {
				return Change{}, refuse(ReasonArchiveID, "archive_ids: %v", err)
			}
			c.Purged = append(c.Purged, id)
		}
		c.PurgedBy = c.Actor
		if p.Approver != nil && strings.TrimSpace(*p.Approver) != "" {
			c.PurgedBy = *p.Approver // the approval is the destroying act
		}
	}
	return c, nil
}

// heldMap validates a lifecycle event's archive → held map (key names it
// in a refusal): at most maxLifecycleIDs canonical archive ids.
func heldMap(key string, in map[string]bool) (map[uuid.UUID]bool, error) {
	if len(in) > maxLifecycleIDs {
		return nil, refuse(ReasonRecordCount, "%s names %d archives, at most %d", key, len(in), maxLifecycleIDs)
	}
	out := make(map[uuid.UUID]bool, len(in))
	for s, held := range in {
		id, err := parseID(s)
		if err != nil {
			return nil, refuse(ReasonArchiveID, "%s: %v", key, err)
		}
		out[id] = held
	}
	return out, nil
}

// superseded validates an archive_superseded event's order and lineage:
// every archive it names has an entry (its successor or null), and no
// other.
func (c *Change) superseded(p lifecyclePayload) error {
	var err error
	if c.ExpungeID, err = parseID(p.ExpungeID); err != nil {
		return refuse(ReasonArchiveID, "expunge_id: %v", err)
	}
	if len(p.SupersededBy) != len(p.ArchiveIDs) || len(p.ArchiveIDs) > maxLifecycleIDs {
		return refuse(ReasonRecordCount, "superseded_by names %d archives, archive_ids %d (at most %d)", len(p.SupersededBy), len(p.ArchiveIDs), maxLifecycleIDs)
	}
	c.SupersededBy = make(map[uuid.UUID]*uuid.UUID, len(p.SupersededBy))
	named := map[string]bool{}
	for _, s := range p.ArchiveIDs {
		if named[s] {
			return refuse(ReasonArchiveID, "archive %s is named twice", s)
		}
		named[s] = true
	}
	for old, next := range p.SupersededBy {
		if next != nil && (*next == old || named[*next]) {
			return refuse(ReasonArchiveID, "archive %s: its successor %s is itself superseded by the order", old, *next)
		}
		id, err := parseID(old)
		if err != nil {
			return refuse(ReasonArchiveID, "superseded_by: %v", err)
		}
		if next == nil {
			c.SupersededBy[id] = nil
			continue
		}
		n, err := parseID(*next)
		if err != nil {
			return refuse(ReasonArchiveID, "superseded_by %s: %v", old, err)
		}
		c.SupersededBy[id] = &n
	}
	for _, s := range p.ArchiveIDs {
		if id, err := parseID(s); err == nil {
			if _, ok := c.SupersededBy[id]; !ok {
				return refuse(ReasonArchiveID, "archive %s has no superseded_by entry", s)
			}
		}
	}
	return nil
}
