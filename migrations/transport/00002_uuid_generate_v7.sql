-- uuid_generate_v7(): time-ordered UUIDs (RFC 9562 version 7) for tables whose
-- ids must sort by creation time, such as the archived tables whose ledgers
-- record min/max record ids (PostgreSQL 15 has no built-in uuidv7()).
-- 48 bits of Unix milliseconds, then the version and variant bits over
-- gen_random_uuid()'s random bits.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION uuid_generate_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION uuid_generate_v7();
