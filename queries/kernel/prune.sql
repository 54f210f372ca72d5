-- The prune loop's view of the other writers (kernel/prune, "yield to
-- writers"): the first transaction id that had not completed when the
-- statement's snapshot was taken, cluster-wide (every database of the server
-- shares one WAL). Read before a call's first batch and after every batch:
-- when it moved by more than the batch's own transaction, other sessions
-- committed writes meanwhile, and the next batches are kept small so their
-- commits never wait behind a large batch's WAL.

-- name: WriteHorizon :one
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next_xid;
