module github.com/craig/retention/services/rules

go 1.26.0

require github.com/craig/retention/kernel v0.0.0-00010101000000-000000000000

replace (
	github.com/craig/retention/kernel => ../../kernel
	github.com/craig/retention/migrations => ../../migrations
)
