module github.com/craig/retention/migrations

go 1.26.0
