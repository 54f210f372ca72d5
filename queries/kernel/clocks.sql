-- Case clocks (migrations/archive/00010, ADR-073).

-- CaseClock is one case's clock.
-- name: CaseClock :many
SELECT subject_hash, state, closed_at, classification, merged_into, changed_at
FROM case_clocks WHERE subject_hash = sqlc.arg(subject_hash);

-- SetCaseClock writes a case's clock as an event left it, unless the clock
-- changed after the event (a stale event: no row). Times are kept to the
-- microsecond; at the same microsecond as the clock's last change only a
-- reopening is applied (the order of the two is unknown, and a reopened
-- case keeps its records).
-- name: SetCaseClock :execrows
INSERT INTO case_clocks (subject_hash, state, closed_at, classification, merged_into, changed_at)
VALUES (sqlc.arg(subject_hash), sqlc.arg(state), sqlc.narg(closed_at), sqlc.narg(classification), sqlc.narg(merged_into), sqlc.arg(changed_at))
ON CONFLICT (subject_hash) DO UPDATE
SET state = EXCLUDED.state, closed_at = EXCLUDED.closed_at, classification = EXCLUDED.classification,
    merged_into = EXCLUDED.merged_into, changed_at = EXCLUDED.changed_at, updated_at = now()
WHERE case_clocks.changed_at < EXCLUDED.changed_at
   OR (case_clocks.changed_at = EXCLUDED.changed_at AND EXCLUDED.state = 'reopened' AND case_clocks.state <> 'reopened');

-- RecordClockEvent keeps an accepted event.
-- name: RecordClockEvent :exec
INSERT INTO case_clock_events (subject_hash, type, at, classification, merged_into, source)
VALUES (sqlc.arg(subject_hash), sqlc.arg(type), sqlc.arg(at), sqlc.narg(classification), sqlc.narg(merged_into), sqlc.arg(source));
