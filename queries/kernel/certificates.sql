-- The acts that destroy records and their certificates, for the records
-- officer's console (ADR-074): listings and what a certificate's
-- verification reads.

-- ListPurges lists the service's purges, newest first.
-- name: ListPurges :many
SELECT purge_id, status, cardinality(candidates)::integer AS candidates, requested_by, requested_at,
       approved_by, executed_at, cardinality(purged)::integer AS purged, certificate_key
FROM purges
WHERE sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status)::text
ORDER BY requested_at DESC, purge_id
LIMIT sqlc.arg(max_rows);

-- ListDispositions lists the service's disposition batches, newest first.
-- name: ListDispositions :many
SELECT disposition_id, status, schedule_version, as_of, rows, proposed_by, proposed_at,
       approved_by, executed_at, rejected_by, rejected_at, certificate_key
FROM dispositions
WHERE sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status)::text
ORDER BY proposed_at DESC, disposition_id
LIMIT sqlc.arg(max_rows);

-- ListCertificates lists every certificate of the service (executed
-- purges, expungements and dispositions), newest first.
-- name: ListCertificates :many
SELECT kind, act_id, certificate_key, executed_at, requested_by, approved_by FROM (
    SELECT 'purge'::text AS kind, purge_id AS act_id, certificate_key, executed_at, requested_by, approved_by
    FROM purges WHERE certificate_key IS NOT NULL AND executed_at IS NOT NULL
    UNION ALL
    SELECT 'expungement'::text, expunge_id, certificate_key, executed_at, requested_by, approved_by
    FROM expungements WHERE certificate_key IS NOT NULL AND executed_at IS NOT NULL
    UNION ALL
    SELECT 'disposition'::text, disposition_id, certificate_key, executed_at, proposed_by, approved_by
    FROM dispositions WHERE certificate_key IS NOT NULL AND executed_at IS NOT NULL
) c
ORDER BY executed_at DESC, act_id
LIMIT sqlc.arg(max_rows);

-- ArchivesDestroyedBy are the archives an act destroyed: a purge's purged
-- list, or the archives an expungement or a disposition batch superseded
-- or purged whole (archive_ledger.expunge_id names the act).
-- name: ArchivesDestroyedBy :many
SELECT archive_id, table_name, data_key, manifest_key
FROM archive_ledger
WHERE purged_at IS NOT NULL
  AND (expunge_id = sqlc.arg(act_id)
       OR archive_id = ANY (SELECT unnest(purged) FROM purges WHERE purge_id = sqlc.arg(act_id)))
ORDER BY archive_id;
