package migrations

import _ "embed" // the partition conversion's SQL

// partitionOutbox converts event_outbox to daily partitions; it
// is not a migration of any set: an operator runs it on request.
//
//go:embed partition/event_outbox.sql
var partitionOutbox string

// PartitionOutboxSQL is the conversion of an existing event_outbox into a
// table range-partitioned by created_at, one partition a day, made by
// pg_partman with its retention off (run it in one transaction).
func PartitionOutboxSQL() string { return partitionOutbox }
