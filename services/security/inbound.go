package security

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/eventsig"
	"github.com/craig/retention/kernel/jsonstrict"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/rabbitmq"
	"github.com/craig/retention/services/security/fleet"
	"github.com/craig/retention/services/security/internal/queries"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Inbound event path: security consumes every event.
const (
	// EventReceivedAction is the audit_log action of a received event.
	EventReceivedAction = "event.received"
	// InboundActor is the audit_log actor of what the inbound path
	// records: the event's claimed source is data, not an identity.
	InboundActor = "system:events"
	// MaxAuditPayload bounds the payload an inbound event's audit_log row
	// stores (1 MiB: every event the services send is a few KiB; a 20 MB
	// body would otherwise be copied into the audit trail): a larger one is
	// recorded by its size and sha256.
	MaxAuditPayload = 1 << 20
	// deadLetterReason is recorded when a dead-lettered event carries no
	// error (it cannot, unless a producer published to the queue itself).
	deadLetterReason = "delivery failed the maximum number of times"
)

// inbound handles received events.
type inbound struct {
	reg   fleet.Registry
	trust *eventsig.Trust // nil: signatures are not checked
	m     *metrics.Fleet
	log   *slog.Logger
	now   func() time.Time
}

// Inbound is security's inbound spec: every event through the inbox into a
// generic audit_log row, archive events validated into the fleet ledger.
func Inbound() *app.InboundSpec[Settings] {
	return &app.InboundSpec[Settings]{
		BindingKeys: []string{"#"},
		New: func(deps app.InboundDeps[Settings]) (app.Inbound, error) {
			m, err := metrics.NewFleet(deps.Registerer)
			if err != nil {
				return app.Inbound{}, err
			}
			m.Known(fleet.Reasons(), FleetRegistry().Sources())
			h := &inbound{reg: FleetRegistry(), trust: deps.Trust, m: m, log: deps.Logger, now: time.Now}
			return app.Inbound{Handle: h.Handle, DeadLetter: h.DeadLetter}, nil
		},
	}
}

// NewInboundHandler returns the handlers for tests and benchmarks that
// drive the inbound path without a broker.
func NewInboundHandler(trust *eventsig.Trust, m *metrics.Fleet, log *slog.Logger) app.Inbound {
	h := &inbound{reg: FleetRegistry(), trust: trust, m: m, log: log, now: time.Now}
	return app.Inbound{Handle: h.Handle, DeadLetter: h.DeadLetter}
}

// outcome is what the fleet branch did with an archive event (recorded in
// the generic audit row's detail.fleet).
type outcome struct {
	Booked    bool     `json:"booked"`
	Refused   string   `json:"refused,omitempty"`
	Rule      string   `json:"rule,omitempty"`
	Divergent []string `json:"divergent,omitempty"`
	KeyID     string   `json:"key_id,omitempty"`
	// Applied counts the fleet rows a lifecycle event changed.
	Applied *int64 `json:"applied,omitempty"`
}

// maxCaseIDBytes bounds the case_id an omitted payload keeps (a case
// number is a few digits; anything longer names no case anyway).
const maxCaseIDBytes = 64

// caseOnly is what an audit row keeps of a payload too large to store: its
// case_id, when it has a short scalar one, so that the row stays the
// case's (fetched, held, sealed and expunged with it, audit_log's payload
// subject); nil otherwise.
func caseOnly(payload []byte) map[string]json.RawMessage {
	var top map[string]json.RawMessage
	if json.Unmarshal(payload, &top) != nil {
		return nil
	}
	v, ok := top["case_id"]
	if !ok || len(v) == 0 || len(v) > maxCaseIDBytes || v[0] == '{' || v[0] == '[' {
		return nil
	}
	return map[string]json.RawMessage{"case_id": v}
}

// Handle records d in audit_log and, for an archive event, books it in the
// fleet ledger after validating it, in tx (the inbox's transaction). A
// refused or divergent event is not an error (it is acknowledged: a forged
// event must never poison-loop the queue); a database error is.
func (h *inbound) Handle(ctx context.Context, tx pgx.Tx, d rabbitmq.Delivery) error {
	detail := map[string]any{
		"event_type": d.Message.EventType, "routing_key": d.RoutingKey,
		"created_at": d.Message.CreatedAt, "payload": d.Message.Payload,
	}
	if n := len(d.Message.Payload); n > MaxAuditPayload {
		// Recorded, not stored whole: its size and hash identify it.
		sum := sha256.Sum256(d.Message.Payload)
		detail["payload"], detail["payload_bytes"], detail["payload_sha256"] = caseOnly(d.Message.Payload), n, hex.EncodeToString(sum[:])
		detail["payload_omitted"] = fmt.Sprintf("larger than %d bytes", MaxAuditPayload)
	}
	if isArchiveEvent(d.Message.EventType) {
		o, err := h.book(ctx, tx, d)
		if err != nil {
			return err
		}
		detail["fleet"] = o
	}
	doc, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("audit detail: %w", err)
	}
	subject := d.Message.ID.String()
	return queries.New(tx).InsertAuditLog(ctx, queries.InsertAuditLogParams{
		Actor: InboundActor, Action: EventReceivedAction, SubjectID: &subject, Detail: doc,
	})
}

// isArchiveEvent: the event types whose signature is checked (with trust
// configured): every `<service>.…archive…` (archives, purges, holds,
// reads, supersessions), the fleet ledger's typed events among them, and
// every court order (`<service>.subject_…`: seals, expungements).
func isArchiveEvent(eventType string) bool {
	_, rest, ok := strings.Cut(eventType, ".")
	return ok && (strings.Contains(rest, "archive") || strings.HasPrefix(rest, "subject_"))
}

// claimedSource is the source an archive event speaks for: its type's
// service prefix (rules.* → craig-rules).
func (h *inbound) claimedSource(eventType string) string {
	if src, ok := h.reg.SourceOf(eventType); ok {
		return src.SourceService
	}
	service, _, _ := strings.Cut(eventType, ".")
	return "craig-" + service
}

// book verifies an archive event's signature and, for the fleet ledger's
// typed events, validates and books it.
func (h *inbound) book(ctx context.Context, tx pgx.Tx, d rabbitmq.Delivery) (outcome, error) {
	var o outcome
	ev := d.Message
	if h.trust != nil {
		keyID, err := h.trust.Verify(d.Body, d.Headers, h.claimedSource(ev.EventType))
		o.KeyID = keyID
		if err != nil {
			// The event could not prove its source: it must not use up its
			// id (the genuine event with that id would be dropped as a
			// duplicate). The refusal is recorded; the claim is given back.
			if err := queries.New(tx).ReleaseInboxClaim(ctx, ev.ID); err != nil {
				return o, fmt.Errorf("release the inbox claim of %s: %w", ev.ID, err)
			}
			return h.refuse(ctx, o, ev.ID.String(), ev.EventType, &fleet.Refusal{Reason: fleet.ReasonSignature, Rule: err.Error()}), nil
		}
	}
	if _, _, ok := fleet.LifecycleKind(ev.EventType); ok {
		return h.applyLifecycle(ctx, tx, d, o)
	}
	if !h.reg.Typed(ev.EventType) {
		return o, nil // signed (or trust is off): recorded like any event
	}
	rec, err := h.reg.Validate(ev.EventType, ev.Payload, h.now())
	if err != nil {
		var r *fleet.Refusal
		if !errors.As(err, &r) {
			return o, err
		}
		return h.refuse(ctx, o, ev.ID.String(), ev.EventType, r), nil
	}
	inserted, err := insertRecord(ctx, tx, rec)
	if err != nil {
		return o, fmt.Errorf("fleet ledger: %w", err)
	}
	if inserted {
		o.Booked = true
		h.m.Booked.WithLabelValues(rec.SourceService).Inc()
		return o, nil
	}
	booked, err := queries.New(tx).GetArchiveRecord(ctx, rec.ArchiveID)
	if err != nil {
		return o, fmt.Errorf("fleet ledger: read booked %s: %w", rec.ArchiveID, err)
	}
	if o.Divergent = fleet.Divergence(recordOf(booked), rec); len(o.Divergent) > 0 {
		h.m.Divergence.WithLabelValues(booked.SourceService).Inc()
		h.log.WarnContext(ctx, "archive event diverges from the booked fleet ledger row; the row is unchanged",
			slog.String("archive_id", rec.ArchiveID.String()), slog.String("source_service", booked.SourceService),
			slog.String("event_id", ev.ID.String()), slog.Any("fields", o.Divergent))
	}
	return o, nil
}

// refuse counts and WARNs a refused archive event.
func (h *inbound) refuse(ctx context.Context, o outcome, eventID, eventType string, r *fleet.Refusal) outcome {
	h.m.Refused.WithLabelValues(r.Reason).Inc()
	h.log.WarnContext(ctx, "archive event refused; nothing booked", slog.String("reason", r.Reason), slog.String("rule", r.Rule),
		slog.String("event_id", eventID), slog.String("event_type", eventType))
	o.Refused, o.Rule = r.Reason, r.Rule
	return o
}

// recordOf is the booked row as a fleet.Record.
func recordOf(b queries.GetArchiveRecordRow) fleet.Record {
	return fleet.Record{
		ArchiveID: b.ArchiveID, SourceService: b.SourceService, Table: b.TableName, DataKey: b.DataKey,
		ManifestKey: b.ManifestKey, DataSHA256: b.DataSha256, RecordCount: int(b.RecordCount),
		StoreEndpoint: b.StoreEndpoint, StoreBucket: b.StoreBucket, FirstRecordID: b.FirstRecordID,
		LastRecordID: b.LastRecordID, FirstRecordAt: b.FirstRecordAt, LastRecordAt: b.LastRecordAt,
		HotWindowDays: int(b.HotWindowDays), ArchivedAt: b.ArchivedAt, ArchivedBy: b.ArchivedBy,
	}
}

// DeadLetter records an event that failed its last delivery in
// dead_letter_audit, with that delivery's error as the reason.
func (h *inbound) DeadLetter(ctx context.Context, tx pgx.Tx, d rabbitmq.Delivery) error {
	reason := d.LastError
	if reason == "" {
		reason = deadLetterReason
	}
	rec := storableDeadLetter(d.Message.EventType, []byte(d.Message.Payload), reason)
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { // a savepoint: a refused insert leaves tx usable
		return queries.New(sp).InsertDeadLetterAudit(ctx, queries.InsertDeadLetterAuditParams{EventType: rec.eventType, Payload: rec.payload, Reason: rec.reason})
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
		// A data exception (a lone surrogate escape, a number beyond
		// numeric's range): PostgreSQL's jsonb refused what Go's JSON
		// accepted. Recorded losslessly instead.
		rec = wrappedDeadLetter(d.Message.EventType, []byte(d.Message.Payload), rec.reason, pe.Code)
		err = queries.New(tx).InsertDeadLetterAudit(ctx, queries.InsertDeadLetterAuditParams{EventType: rec.eventType, Payload: rec.payload, Reason: rec.reason})
	}
	if err != nil {
		return fmt.Errorf("dead_letter_audit: %w", err)
	}
	h.m.DeadLettered.Inc()
	h.log.WarnContext(ctx, "event dead-lettered and recorded in dead_letter_audit", slog.String("event_id", d.Message.ID.String()),
		slog.String("event_type", d.Message.EventType), slog.Int("attempts", d.Attempt), slog.String("reason", reason))
	return nil
}

// applyLifecycle validates a producer's lifecycle event and applies it to
// that producer's fleet rows only.
func (h *inbound) applyLifecycle(ctx context.Context, tx pgx.Tx, d rabbitmq.Delivery, o outcome) (outcome, error) {
	ev := d.Message
	c, err := fleet.ValidateLifecycle(ev.EventType, ev.Payload, h.now())
	if err != nil {
		var r *fleet.Refusal
		if !errors.As(err, &r) {
			return o, err
		}
		return h.refuse(ctx, o, ev.ID.String(), ev.EventType, r), nil
	}
	q := queries.New(tx)
	at := pgtype.Timestamptz{Time: c.At, Valid: true}
	// Events apply in order per archive: rows that already saw a later (or
	// this) event are left as they are, and the event is counted stale.
	stale, err := q.StaleFleetRows(ctx, queries.StaleFleetRowsParams{ArchiveIds: c.IDs(), SourceService: c.SourceService, At: at})
	if err != nil {
		return o, fmt.Errorf("fleet ledger: %w", err)
	}
	var n int64
	switch c.Kind {
	case fleet.KindRetentionSet:
		n, err = q.ApplyFleetRetention(ctx, queries.ApplyFleetRetentionParams{
			RetentionUntil: pgtype.Date{Time: c.RetentionUntil, Valid: true}, At: at, ArchiveID: c.ArchiveID, SourceService: c.SourceService})
	case fleet.KindHoldPlaced, fleet.KindHoldReleased:
		for _, id := range c.IDs() {
			p := queries.ApplyFleetLegalHoldParams{At: at, ArchiveID: id, SourceService: c.SourceService}
			if held, ok := c.LegalHold[id]; ok {
				p.LegalHold = &held
			}
			if held, ok := c.SubjectHold[id]; ok {
				p.SubjectHold = &held
			}
			m, err := q.ApplyFleetLegalHold(ctx, p)
			if err != nil {
				return o, fmt.Errorf("fleet ledger: %w", err)
			}
			n += m
		}
	case fleet.KindPurged:
		n, err = q.ApplyFleetPurged(ctx, queries.ApplyFleetPurgedParams{
			PurgedAt: at, PurgedBy: &c.PurgedBy, ArchiveIds: c.Purged, SourceService: c.SourceService})
	case fleet.KindSuperseded:
		n, err = applySuperseded(ctx, q, c, at)
	}
	if err != nil {
		return o, fmt.Errorf("fleet ledger: %w", err)
	}
	o.Applied = &n
	if stale > 0 {
		o = h.refuse(ctx, o, ev.ID.String(), ev.EventType, &fleet.Refusal{Reason: fleet.ReasonStale,
			Rule: fmt.Sprintf("%d of its archives' fleet rows already applied a lifecycle event at or after %s", stale, c.At.Format(time.RFC3339Nano))})
	}
	return o, nil
}

// deadLetterRecord is a dead letter as dead_letter_audit can store it.
type deadLetterRecord struct {
	eventType, reason string
	payload           []byte
}

// storableDeadLetter makes a dead letter storable whatever its bytes:
// PostgreSQL's jsonb refuses a \u0000 escape and invalid UTF-8, and text
// refuses NUL bytes, and a record that cannot be inserted would be retried
// without end. A payload that is not storable JSON is kept losslessly as
// {"unstorable_payload": true, "payload_base64": …}; an event type or
// reason that is not storable text is escaped (its exact bytes kept in
// base64 beside the payload, flagged).
func storableDeadLetter(eventType string, payload []byte, reason string) deadLetterRecord {
	text := func(v string) (string, bool) {
		if utf8.ValidString(v) && !strings.ContainsRune(v, 0) {
			return v, true
		}
		return strings.ToValidUTF8(strings.ReplaceAll(v, "\x00", `\u0000`), "\uFFFD"), false
	}
	et, etOK := text(eventType)
	rs, _ := text(reason)
	// A key written twice is valid JSON that jsonb keeps only the last of:
	// the first value would be lost.
	okJSON := len(payload) > 0 && utf8.Valid(payload) && json.Valid(payload) && !bytes.Contains(payload, []byte(`\u0000`)) &&
		jsonstrict.CheckKeys(payload, nil) == nil
	if okJSON && etOK {
		return deadLetterRecord{eventType: et, reason: rs, payload: payload}
	}
	return wrappedDeadLetter(eventType, payload, rs, "")
}

// wrappedDeadLetter keeps a dead letter's exact bytes as base64, flagged
// (refusedAs: the SQLSTATE with which PostgreSQL refused it as it was).
func wrappedDeadLetter(eventType string, payload []byte, reason, refusedAs string) deadLetterRecord {
	et := strings.ToValidUTF8(strings.ReplaceAll(eventType, "\x00", `\u0000`), "\uFFFD")
	wrapped := map[string]any{"unstorable_payload": true, "payload_base64": base64.StdEncoding.EncodeToString(payload)}
	if et != eventType {
		wrapped["event_type_base64"] = base64.StdEncoding.EncodeToString([]byte(eventType))
	}
	if refusedAs != "" {
		wrapped["refused_by_postgresql"] = refusedAs
	}
	doc, _ := json.Marshal(wrapped) // strings and a bool: cannot fail
	return deadLetterRecord{eventType: et, reason: reason, payload: doc}
}

// applySuperseded stamps each archive an expungement rewrote, with its
// successor: the fleet ledger's lineage.
func applySuperseded(ctx context.Context, q *queries.Queries, c fleet.Change, at pgtype.Timestamptz) (int64, error) {
	var n int64
	for _, id := range c.Purged {
		p := queries.ApplyFleetSupersededParams{PurgedAt: at, PurgedBy: &c.PurgedBy, ExpungeID: pgtype.UUID{Bytes: c.ExpungeID, Valid: true},
			ArchiveID: id, SourceService: c.SourceService}
		if next := c.SupersededBy[id]; next != nil {
			p.SupersededBy = pgtype.UUID{Bytes: *next, Valid: true}
		}
		m, err := q.ApplyFleetSuperseded(ctx, p)
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}
