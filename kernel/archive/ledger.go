package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Bookkeeper is the one bookkeeping of every archiving service: inside each
// archive's delete transaction it writes the service's LOCAL archive_ledger
// row (the truth for purge, holds, fetch and GC; migrations/archive) and
// stages an ArchivedEvent for the fleet ledger, so both commit with the
// delete or neither does. A service names its event type and source.
type Bookkeeper struct {
	// EventType is the staged event's type (routing key), e.g.
	// rules.evaluations_archived.
	EventType string
	// SourceService is the event's source_service, e.g. craig-rules; the
	// fleet ledger validates it before any write.
	SourceService string
	// Also books the archive somewhere else in the same transaction, after
	// the ledger row and before the event is staged (security writes its
	// own archives' fleet ledger row here); nil for nothing. An error rolls
	// the archive back like any bookkeeping error.
	Also func(ctx context.Context, tx pgx.Tx, ev ArchivedEvent) error
}

// ArchivedEvent is the payload of the archive event: the ledger's facts, so
// the fleet ledger is kept without reading the service's database.
type ArchivedEvent struct {
	SourceService string `json:"source_service"`
	ArchiveID     string `json:"archive_id"`
	Table         string `json:"table"`
	DataKey       string `json:"data_key"`
	ManifestKey   string `json:"manifest_key"`
	DataSHA256    string `json:"data_sha256"`
	RecordCount   int    `json:"record_count"`
	StoreEndpoint string `json:"store_endpoint"`
	StoreBucket   string `json:"store_bucket"`
	FirstRecordID string `json:"first_record_id"`
	LastRecordID  string `json:"last_record_id"`
	FirstRecordAt string `json:"first_record_at"`
	LastRecordAt  string `json:"last_record_at"`
	HotWindowDays int    `json:"hot_window_days"`
	ArchivedAt    string `json:"archived_at"`
	ArchivedBy    string `json:"archived_by"`
}

// eventTime is the events' timestamp format: RFC 3339 in UTC with up to
// microseconds (the database's precision).
const eventTime = "2006-01-02T15:04:05.999999Z07:00"

// Bookkeep writes the ledger row and stages the event in tx. It satisfies
// BookkeepFunc.
func (b Bookkeeper) Bookkeep(ctx context.Context, tx pgx.Tx, m Manifest, archivedBy string) error {
	if m.Endpoint == "" || m.Bucket == "" {
		return fmt.Errorf("archive %s: store identity (endpoint %q, bucket %q) must be non-empty", m.ArchiveID, m.Endpoint, m.Bucket)
	}
	count, hot := int32(m.RecordCount), int32(m.HotWindowDays) // bounded by batch size and 3650
	ts := func(t time.Time) pgtype.Timestamptz { return pgtype.Timestamptz{Time: t, Valid: true} }
	id := func(u [16]byte) pgtype.UUID { return pgtype.UUID{Bytes: u, Valid: true} }
	err := queries.New(tx).InsertArchiveLedger(ctx, queries.InsertArchiveLedgerParams{
		ArchiveID: id(m.ArchiveID), TableName: m.Table, DataKey: m.DataKey, ManifestKey: m.ManifestKey,
		DataSha256: m.DataSHA256, RecordCount: count, StoreEndpoint: m.Endpoint, StoreBucket: m.Bucket,
		FirstRecordID: id(m.FirstRecordID), LastRecordID: id(m.LastRecordID),
		FirstRecordAt: ts(m.FirstRecordAt), LastRecordAt: ts(m.LastRecordAt),
		HotWindowDays: hot, ArchivedAt: ts(m.ArchivedAt), ArchivedBy: archivedBy,
	})
	if err != nil {
		return fmt.Errorf("ledger row: %w", err)
	}
	ev := ArchivedEvent{
		SourceService: b.SourceService, ArchiveID: m.ArchiveID.String(), Table: m.Table,
		DataKey: m.DataKey, ManifestKey: m.ManifestKey, DataSHA256: m.DataSHA256, RecordCount: m.RecordCount,
		StoreEndpoint: m.Endpoint, StoreBucket: m.Bucket,
		FirstRecordID: m.FirstRecordID.String(), LastRecordID: m.LastRecordID.String(),
		FirstRecordAt: m.FirstRecordAt.UTC().Format(eventTime), LastRecordAt: m.LastRecordAt.UTC().Format(eventTime),
		HotWindowDays: m.HotWindowDays, ArchivedAt: m.ArchivedAt.UTC().Format(eventTime), ArchivedBy: archivedBy,
	}
	if b.Also != nil {
		if err := b.Also(ctx, tx, ev); err != nil {
			return fmt.Errorf("book %s: %w", m.ArchiveID, err)
		}
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("event payload: %w", err)
	}
	if _, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: b.EventType, Payload: payload}); err != nil {
		return fmt.Errorf("stage %s: %w", b.EventType, err)
	}
	return nil
}
