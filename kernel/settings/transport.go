package settings

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/craig/retention/kernel/prune"
)

// Defaults of the transport keys. Each is what a service on one machine with
// the local PostgreSQL and RabbitMQ needs; production overrides the URLs.
const (
	// DefaultOutboxRetentionDays keeps published outbox rows for 30 days,
	// the documented replay horizon (ADR-022 as corrected by ADR-058).
	DefaultOutboxRetentionDays = 30
	// DefaultInboxRetentionDays is one day longer than the outbox window:
	// the inbox dedup record must outlive every replayable outbox row by
	// more than one prune cadence plus clock skew.
	DefaultInboxRetentionDays = 31
	// DefaultLocalRetentionDays is the window of a service-local sweep
	// (exchange_send_jobs, subsidy_reconcile_queue) unless configured.
	DefaultLocalRetentionDays = 30
	// MaxRetentionDays is the longest window accepted: ten years. A larger
	// value is a typo (days for hours, say), not a policy.
	MaxRetentionDays = prune.MaxWindowDays
	// MinInboxMarginDays is how much longer the inbox window must be than the
	// outbox window when both sweeps are on.
	MinInboxMarginDays = 1
	// DefaultPruneYieldToWriters is on: the bench (pooled, with
	// intervals) measured a writer's p99 commit latency during a backlog
	// drain at 63-90x its latency alone with full batches and 2.1-2.2x with
	// batches of a hundredth (the floor a CPU-only load of the same size
	// sets on 2 cores), while a drain with nobody else writing keeps the
	// full batch size.
	DefaultPruneYieldToWriters = true
	// DefaultPruneMaxReplicaLag pauses the sweep while a streaming replica
	// replays more than 10 s behind: a replica that far behind
	// serves stale reads and delays failover, and a drain's WAL is what
	// puts it there. pt-archiver's --max-lag defaults to 1 s for MySQL
	// replicas; PostgreSQL's replay_lag includes the replica's own apply
	// time, so the bound is looser.
	DefaultPruneMaxReplicaLag = 10 * time.Second
	// DefaultPruneMaxWALBytesPerSecond is 0: no WAL rate bound unless an
	// operator sets one (what WAL a disk, archive or backup can take is
	// the site's to know).
	DefaultPruneMaxWALBytesPerSecond = 0
	// DefaultPruneMaxPause is prune.DefaultMaxPause: a table waits at most
	// a minute a cycle, then waits for the next cycle and says so.
	DefaultPruneMaxPause = prune.DefaultMaxPause
	// DefaultVacuumHorizonMaxHeld is an hour, one sweep cycle: a snapshot
	// or prepared transaction older than that keeps everything the last
	// cycle deleted on disk.
	DefaultVacuumHorizonMaxHeld = time.Hour
	// MaxVacuumHorizonMaxHeld is a week: a longer bound watches nothing.
	MaxVacuumHorizonMaxHeld = 7 * 24 * time.Hour
	// DefaultVacuumSlotMaxRetainedWALBytes is 10 GiB: about an hour of a
	// busy service's WAL, and far more than a healthy consumer lags; a
	// slot holding more has a consumer that is down or gone, and the
	// primary's disk is what fills.
	DefaultVacuumSlotMaxRetainedWALBytes = 10 << 30
	// MaxVacuumSlotMaxRetainedWALBytes is 1 TiB: a larger bound is a full
	// disk before it is a finding.
	MaxVacuumSlotMaxRetainedWALBytes = 1 << 40
	// DefaultVacuumDeadTuplesMax is a million: autovacuum's default
	// trigger (20 % of the table plus 50 rows) is far below it for the
	// tables the sweeps keep small, so a swept table past it is one VACUUM
	// is not keeping up with.
	DefaultVacuumDeadTuplesMax = 1_000_000
	// MaxVacuumDeadTuplesMax is a trillion rows: larger watches nothing.
	MaxVacuumDeadTuplesMax = 1_000_000_000_000
	// DefaultPruneBatchSize matches prune.DefaultBatchSize.
	DefaultPruneBatchSize = prune.DefaultBatchSize
	// MaxPruneBatchSize bounds one DELETE; beyond it a batch holds locks and
	// WAL for seconds, which is what batching exists to avoid.
	MaxPruneBatchSize = 100_000
	// DefaultPruneCycleCap matches prune.DefaultCycleCap.
	DefaultPruneCycleCap = prune.DefaultCycleCap
	// MaxPruneCycleCap bounds the cycle cap: the cap is the clock-jump
	// guard (a wrong clock must not mass-delete), and a cap of
	// 9e18 would switch it off. Ten times the default still lets a backlog
	// drain of ten million rows run in one cycle.
	MaxPruneCycleCap = 10_000_000
	// DefaultReplayMaxAgeDays is the oldest an admin replay may reach: the
	// inbox window every consumer of the fleet guarantees (31 days, ADR-022)
	// less a day of margin for prune cadence and clock skew.
	DefaultReplayMaxAgeDays = 30
	// DefaultReplayMaxRows is the largest replay accepted: a range with more
	// rows floods the broker and every consumer; narrow it instead.
	DefaultReplayMaxRows = 100_000
	// MaxReplayMaxRows bounds replay_max_rows like the cycle cap bounds a
	// sweep: a replay is a bulk act and must stay one an operator meant.
	MaxReplayMaxRows = 10_000_000
	// DefaultDatabaseConnectTimeout bounds opening a database connection
	// (TCP, TLS and the startup handshake): a server that accepts and never
	// answers must fail the command, not hang it.
	DefaultDatabaseConnectTimeout = 10 * time.Second
	// MinDatabaseConnectTimeout and MaxDatabaseConnectTimeout bound it:
	// below a second a busy server's handshake fails; above five minutes a
	// hung server hangs an operator's command for longer than anyone waits.
	MinDatabaseConnectTimeout = time.Second
	MaxDatabaseConnectTimeout = 5 * time.Minute
	// MaxPlanCheckSeqScanRows is ten billion rows: a threshold above any
	// table's size switches the plan check off, which 0..this cannot.
	MaxPlanCheckSeqScanRows = 10_000_000_000
	// MinAdminTokenLength is the shortest admin token accepted: 32
	// characters of a random token are ~190 bits; a short or guessable one
	// on a non-loopback address lets anyone re-publish events.
	MinAdminTokenLength = 32
	// DefaultPruneStatementTimeout bounds one batch DELETE on the server: a
	// 5,000-row batch takes well under a second, so 30 s only stops a
	// pathological plan, not a busy one.
	DefaultPruneStatementTimeout = 30 * time.Second
	// DefaultPruneLockTimeout is how long one batch waits for a row or table
	// lock (a replay, a drain, a migration) before it yields and retries.
	DefaultPruneLockTimeout = 5 * time.Second
	// MaxPruneTimeout caps both timeouts: a batch holding locks longer than
	// this is what batching exists to prevent.
	MaxPruneTimeout = time.Hour
	// DefaultPlanCheckSeqScanRows is the table size (planner estimate) above
	// which a sequential-scan sweep plan is reported: below it a scan costs
	// a few milliseconds an hour and no index is worth demanding.
	DefaultPlanCheckSeqScanRows = 100_000
	// DefaultHTTPAddr serves /metrics, /healthz and the admin API on
	// loopback only unless an operator exposes it.
	DefaultHTTPAddr = "127.0.0.1:8080"
	// DefaultAMQPURL is the broker every machine of this kind runs.
	DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	// DefaultAMQPExchange is the topic exchange events are published to.
	DefaultAMQPExchange = "craig.events"
	// DefaultLogLevel logs work done and problems, not idle cycles.
	DefaultLogLevel = "info"
	// DefaultOutboxMaxAttempts dead-letters a row after 25 refused
	// publications (ADR-075). With the drain's backoff (1 s doubling to an
	// hour) the 25th comes about 13 hours after the first: a refusal that
	// outlasts a night is the row's, or an outage someone must see, and the
	// first dead letter alerts. A broker that is unreachable or blocked
	// costs no attempt at all.
	DefaultOutboxMaxAttempts = 25
	// MaxOutboxMaxAttempts bounds outbox.max_attempts: a larger count is
	// "forever" spelled as a typo; 0 says forever.
	MaxOutboxMaxAttempts = 10_000
	// DefaultOutboxDeadLetterRetentionDays keeps dead letters forever: they
	// are the only evidence of an event that never left.
	DefaultOutboxDeadLetterRetentionDays = 0
)

// Transport holds the keys every service shares: where its database and
// broker are, and the transport sweep's windows and bounds.
type Transport struct {
	// Derived holds the values of the keys the service's tables declare
	// (their windows, hot windows and retention schedules; LoadDerived),
	// each at its default when not set. It is not a key itself.
	Derived Values `koanf:"-"`
	// DatabaseURL is the service's PostgreSQL database (required).
	DatabaseURL string `koanf:"database_url"`
	// HTTPAddr is where serve listens.
	HTTPAddr string `koanf:"http_addr"`
	// AMQPURL is the RabbitMQ broker the outbox drain publishes to.
	AMQPURL string `koanf:"amqp_url"`
	// AMQPExchange is the topic exchange events are published to.
	AMQPExchange string `koanf:"amqp_exchange"`
	// EventOutboxRetentionDays is the published-outbox window; 0 disables
	// the outbox sweep.
	EventOutboxRetentionDays int `koanf:"event_outbox_retention_days"`
	// EventInboxRetentionDays is the inbox window; 0 disables the inbox sweep.
	EventInboxRetentionDays int `koanf:"event_inbox_retention_days"`
	// ReplayMaxAgeDays is the oldest an admin replay may reach, whatever
	// this service's own outbox window: consumers' inbox dedup records age
	// out after the fleet's inbox window.
	ReplayMaxAgeDays int `koanf:"replay_max_age_days"`
	// ReplayMaxRows is the most rows one admin replay may re-queue.
	ReplayMaxRows int64 `koanf:"replay_max_rows"`
	// DatabaseConnectTimeout bounds opening each database connection.
	DatabaseConnectTimeout time.Duration `koanf:"database_connect_timeout"`
	// PruneBatchSize is the most rows one DELETE removes.
	PruneBatchSize int `koanf:"prune_batch_size"`
	// PruneCycleCap is the most rows one table's prune deletes per cycle.
	PruneCycleCap int64 `koanf:"prune_cycle_cap"`
	// PruneStatementTimeout bounds each batch statement (statement_timeout,
	// see prune.Policy.StatementTimeout).
	PruneStatementTimeout time.Duration `koanf:"prune_statement_timeout"`
	// PruneLockTimeout bounds each batch statement's lock waits
	// (lock_timeout).
	PruneLockTimeout time.Duration `koanf:"prune_lock_timeout"`
	// PruneYieldToWriters keeps the transport sweep's batches at a hundredth of
	// prune_batch_size while other sessions of the server are committing
	// writes (prune.Policy.YieldToWriters).
	PruneYieldToWriters bool `koanf:"prune_yield_to_writers"`
	// PruneMaxReplicaLag pauses every sweep of the service before a batch
	// while a streaming replica of its server replays further behind than
	// this (pg_stat_replication.replay_lag; the role needs pg_monitor); 0s
	// disables the check.
	PruneMaxReplicaLag time.Duration `koanf:"prune_max_replica_lag"`
	// PruneMaxWALBytesPerSecond paces every sweep of the service so that
	// the WAL its batches write stays under this rate; 0 disables it.
	PruneMaxWALBytesPerSecond int64 `koanf:"prune_max_wal_bytes_per_second"`
	// PruneMaxPause bounds how long one table's prune waits in a cycle for
	// lagging replicas and the WAL rate; past it the table waits for the
	// next cycle (retention_prune_paused_seconds_total{table,reason}).
	PruneMaxPause time.Duration `koanf:"prune_max_pause"`
	// VacuumHorizonMaxHeld is the longest a session or prepared transaction
	// may hold the database's xmin horizon before the vacuum watchdog
	// (invariant vacuum_horizon_held, serve's WARN) says VACUUM cannot
	// reclaim what the sweeps delete; 0s disables it.
	VacuumHorizonMaxHeld time.Duration `koanf:"vacuum_horizon_max_held"`
	// VacuumSlotMaxRetainedWALBytes is the most WAL a replication slot may
	// keep on the primary before the vacuum watchdog (invariant
	// vacuum_slot_wal_retained, the sweep report, serve's WARN, alert
	// RetentionSlotRetainingWAL) reports it; 0 disables it.
	VacuumSlotMaxRetainedWALBytes int64 `koanf:"vacuum_slot_max_retained_wal_bytes"`
	// VacuumDeadTuplesMax is the most dead tuples a swept table may hold
	// before the sweep report and serve's WARN say VACUUM is not keeping
	// up with what the sweep deletes (alert RetentionDeadTuplesGrowing);
	// 0 disables it.
	VacuumDeadTuplesMax int64 `koanf:"vacuum_dead_tuples_max"`
	// PlanCheckSeqScanRows is the table size above which probe and serve
	// warn about a sweep plan that scans the whole table.
	PlanCheckSeqScanRows int64 `koanf:"plan_check_seqscan_rows"`
	// AdminToken, when set, is the bearer token the admin API requires.
	AdminToken string `koanf:"admin_token"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `koanf:"log_level"`
	// Events are the keys of signed events (events.*).
	Events Events `koanf:"events"`
	// Auth configures the JWT verification of the archive API (auth.*).
	Auth Auth `koanf:"auth"`
	// Outbox configures the drain's dead letters (outbox.*).
	Outbox Outbox `koanf:"outbox"`
}

// OutboxDeadLetterRetentionKey is the dead letters' window key.
const OutboxDeadLetterRetentionKey = "outbox.dead_letter_retention_days"

// Outbox holds the drain's dead-letter keys (ADR-075).
type Outbox struct {
	// MaxAttempts is how many refused publications dead-letter an outbox
	// row; 0 retries it forever (the transport specification's behaviour).
	// A malformed envelope is dead-lettered at once whatever it is.
	MaxAttempts int `koanf:"max_attempts"`
	// DeadLetterRetentionDays sweeps a dead letter this many days after it
	// was dead-lettered; 0 keeps dead letters forever, since each is the
	// only evidence of an event that never left. An agency sets it when its
	// records schedule gives undelivered events a retention of their own
	// (the audit log's, say), or when a dead letter's payload, which may
	// name a person, must not outlive the records it was about.
	DeadLetterRetentionDays int `koanf:"dead_letter_retention_days"`
	// Mandatory publishes with the mandatory flag: an event no queue is
	// bound for is refused (and dead-lettered after its attempts) instead
	// of being confirmed and dropped by the broker.
	Mandatory bool `koanf:"mandatory"`
}

// Problems checks the outbox keys.
func (o Outbox) Problems() []Problem {
	var ps []Problem
	if o.MaxAttempts < 0 || o.MaxAttempts > MaxOutboxMaxAttempts {
		ps = append(ps, Problem{Key: "outbox.max_attempts", Value: o.MaxAttempts,
			Reason: fmt.Sprintf("must be between 0 (retry forever) and %d", MaxOutboxMaxAttempts)})
	}
	return append(ps, WindowProblems(OutboxDeadLetterRetentionKey, o.DeadLetterRetentionDays)...)
}

// Auth names the key the archive API's bearer tokens are verified with (at
// most one source) and the claims checked (kernel/auth). With none the
// archive API is not served.
type Auth struct {
	// JWTHS256SecretFile holds an HS256 secret (at least 32 bytes).
	JWTHS256SecretFile string `koanf:"jwt_hs256_secret_file"`
	// JWTHS256Secret is the secret itself, for tests and the demo.
	JWTHS256Secret string `koanf:"jwt_hs256_secret"`
	// JWTPublicKeyFile is a PEM public key: RSA (RS256), P-256 (ES256) or
	// Ed25519 (EdDSA).
	JWTPublicKeyFile string `koanf:"jwt_public_key_file"`
	// JWKSFile is a JWK Set; tokens name their key by kid.
	JWKSFile string `koanf:"jwks_file"`
	// Issuer, when set, must be the token's iss.
	Issuer string `koanf:"issuer"`
	// Audience, when set, must be among the token's aud.
	Audience string `koanf:"audience"`
}

// Configured reports whether a verification key is configured.
func (a Auth) Configured() bool {
	return a.JWTHS256SecretFile != "" || a.JWTHS256Secret != "" || a.JWTPublicKeyFile != "" || a.JWKSFile != ""
}

// minJWTSecretBytes is the shortest HS256 secret (auth.MinSecretBytes).
const minJWTSecretBytes = 32

// Problems checks the auth keys: one key source at most, a long enough
// inline secret.
func (a Auth) Problems() []Problem {
	var ps []Problem
	n := 0
	for _, set := range []bool{a.JWTHS256SecretFile != "", a.JWTHS256Secret != "", a.JWTPublicKeyFile != "", a.JWKSFile != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		ps = append(ps, Problem{Key: "auth.jwt_public_key_file", Value: a.JWTPublicKeyFile,
			Reason:  "configure one key source: auth.jwt_hs256_secret_file, auth.jwt_hs256_secret, auth.jwt_public_key_file or auth.jwks_file",
			Related: []string{"auth.jwt_hs256_secret_file", "auth.jwt_hs256_secret", "auth.jwks_file"}})
	}
	if a.JWTHS256Secret != "" && len(a.JWTHS256Secret) < minJWTSecretBytes {
		ps = append(ps, Problem{Key: "auth.jwt_hs256_secret", Value: a.JWTHS256Secret, Reason: fmt.Sprintf("must be at least %d bytes", minJWTSecretBytes)})
	}
	return ps
}

// Events configures the signing of published events and the trust of
// received ones (kernel/eventsig). Key files are read at boot; their
// content never appears in an error or a log line.
type Events struct {
	// SigningKeyFile is the PEM PKCS #8 Ed25519 private key every published
	// event is signed with; empty publishes unsigned events.
	SigningKeyFile string `koanf:"signing_key_file"`
	// SigningKeyID is the id the signature announces (the consumer's trust
	// file maps it to this service); required with SigningKeyFile.
	SigningKeyID string `koanf:"signing_key_id"`
	// TrustedKeysFile lists the producer keys a consuming service accepts
	// (`<key id> <source service> <base64 public key>` per line); with it,
	// an unsigned or wrongly signed archive event is refused.
	TrustedKeysFile string `koanf:"trusted_keys_file"`
	// CaseEventsProducer is the source service (as the trust file names
	// it, e.g. craig-cases) whose signed case.closed, case.reopened and
	// case.merged events move this service's case clocks (ADR-073). Empty
	// (the default): none is consumed, since a clock decides when records
	// are destroyed and an unconfigured producer must not start one. It
	// requires trusted_keys_file: an unsigned case event is refused.
	CaseEventsProducer string `koanf:"case_events_producer"`
}

// Problems checks the events keys.
func (e Events) Problems() []Problem {
	var ps []Problem
	if (e.SigningKeyFile == "") != (e.SigningKeyID == "") {
		ps = append(ps, Problem{Key: "events.signing_key_id", Value: e.SigningKeyID,
			Reason: "events.signing_key_file and events.signing_key_id are set together or not at all", Related: []string{"events.signing_key_file"}})
	} else if e.SigningKeyID != "" && !eventKeyID.MatchString(e.SigningKeyID) {
		ps = append(ps, Problem{Key: "events.signing_key_id", Value: e.SigningKeyID, Reason: "must be 1..64 letters, digits and . _ : - (starting with a letter or digit)"})
	}
	if e.CaseEventsProducer != "" && !producerName.MatchString(e.CaseEventsProducer) {
		ps = append(ps, Problem{Key: "events.case_events_producer", Value: e.CaseEventsProducer,
			Reason: "must be a service name: 1..64 lower-case letters, digits and - (starting with a letter)"})
	} else if e.CaseEventsProducer != "" && e.TrustedKeysFile == "" {
		ps = append(ps, Problem{Key: "events.case_events_producer", Value: e.CaseEventsProducer,
			Reason:  "case events move the clocks that destroy records: they are accepted only signed, so events.trusted_keys_file is required",
			Related: []string{"events.trusted_keys_file"}})
	}
	return ps
}

// producerName is a source service's name as a trust file writes it.
var producerName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,63}$`)

// eventKeyID is eventsig's key id syntax.
var eventKeyID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

// DefaultTransport returns the transport defaults for a service whose
// database is databaseURL.
func DefaultTransport(databaseURL string) Transport {
	return Transport{
		DatabaseURL:                   databaseURL,
		HTTPAddr:                      DefaultHTTPAddr,
		AMQPURL:                       DefaultAMQPURL,
		AMQPExchange:                  DefaultAMQPExchange,
		EventOutboxRetentionDays:      DefaultOutboxRetentionDays,
		EventInboxRetentionDays:       DefaultInboxRetentionDays,
		ReplayMaxAgeDays:              DefaultReplayMaxAgeDays,
		ReplayMaxRows:                 DefaultReplayMaxRows,
		DatabaseConnectTimeout:        DefaultDatabaseConnectTimeout,
		PruneBatchSize:                DefaultPruneBatchSize,
		PruneCycleCap:                 DefaultPruneCycleCap,
		PruneStatementTimeout:         DefaultPruneStatementTimeout,
		PruneLockTimeout:              DefaultPruneLockTimeout,
		PruneYieldToWriters:           DefaultPruneYieldToWriters,
		PruneMaxReplicaLag:            DefaultPruneMaxReplicaLag,
		PruneMaxWALBytesPerSecond:     DefaultPruneMaxWALBytesPerSecond,
		PruneMaxPause:                 DefaultPruneMaxPause,
		VacuumHorizonMaxHeld:          DefaultVacuumHorizonMaxHeld,
		VacuumSlotMaxRetainedWALBytes: DefaultVacuumSlotMaxRetainedWALBytes,
		VacuumDeadTuplesMax:           DefaultVacuumDeadTuplesMax,
		PlanCheckSeqScanRows:          DefaultPlanCheckSeqScanRows,
		LogLevel:                      DefaultLogLevel,
		Outbox:                        Outbox{MaxAttempts: DefaultOutboxMaxAttempts, DeadLetterRetentionDays: DefaultOutboxDeadLetterRetentionDays},
	}
}

// Problems checks the transport keys.
func (t Transport) Problems() []Problem {
	var ps []Problem
	ps = append(ps, t.windowProblems()...)
	ps = append(ps, t.replayProblems()...)
	ps = append(ps, t.endpointProblems()...)
	ps = append(ps, t.pruneProblems()...)
	ps = append(ps, t.Events.Problems()...)
	ps = append(ps, t.Auth.Problems()...)
	ps = append(ps, t.Outbox.Problems()...)
	switch t.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		ps = append(ps, Problem{Key: "log_level", Value: t.LogLevel, Reason: "must be debug, info, warn or error"})
	}
	return ps
}

// windowProblems checks the two transport windows and the rule between them.
func (t Transport) windowProblems() []Problem {
	var ps []Problem
	ps = append(ps, WindowProblems("event_outbox_retention_days", t.EventOutboxRetentionDays)...)
	ps = append(ps, WindowProblems("event_inbox_retention_days", t.EventInboxRetentionDays)...)
	if t.EventOutboxRetentionDays > 0 && t.EventInboxRetentionDays > 0 &&
		t.EventInboxRetentionDays < t.EventOutboxRetentionDays+MinInboxMarginDays {
		ps = append(ps, Problem{
			Key:   "event_inbox_retention_days",
			Value: t.EventInboxRetentionDays,
			Reason: fmt.Sprintf("must be at least event_outbox_retention_days + %d = %d (event_outbox_retention_days=%d): the inbox dedup record must outlive every replayable outbox row; set 0 to disable one sweep instead",
				MinInboxMarginDays, t.EventOutboxRetentionDays+MinInboxMarginDays, t.EventOutboxRetentionDays),
			Related: []string{"event_outbox_retention_days"},
		})
	}
	return ps
}

// replayProblems checks the admin replay's bounds.
func (t Transport) replayProblems() []Problem {
	var ps []Problem
	if t.ReplayMaxAgeDays < 1 || t.ReplayMaxAgeDays > MaxRetentionDays {
		ps = append(ps, Problem{Key: "replay_max_age_days", Value: t.ReplayMaxAgeDays, Reason: fmt.Sprintf("must be between 1 and %d days", MaxRetentionDays)})
	} else if t.EventInboxRetentionDays > 0 && t.ReplayMaxAgeDays > t.EventInboxRetentionDays-MinInboxMarginDays {
		ps = append(ps, Problem{Key: "replay_max_age_days", Value: t.ReplayMaxAgeDays,
			Reason: fmt.Sprintf("must be at most event_inbox_retention_days - %d = %d (event_inbox_retention_days=%d): a replay older than the inbox window would reach events whose dedup records are gone",
				MinInboxMarginDays, t.EventInboxRetentionDays-MinInboxMarginDays, t.EventInboxRetentionDays),
			Related: []string{"event_inbox_retention_days"}})
	}
	if t.ReplayMaxRows < 1 || t.ReplayMaxRows > MaxReplayMaxRows {
		ps = append(ps, Problem{Key: "replay_max_rows", Value: t.ReplayMaxRows, Reason: fmt.Sprintf("must be between 1 and %d rows", MaxReplayMaxRows)})
	}
	return ps
}

// endpointProblems checks where the service connects and listens.
func (t Transport) endpointProblems() []Problem {
	var ps []Problem
	if t.DatabaseConnectTimeout < MinDatabaseConnectTimeout || t.DatabaseConnectTimeout > MaxDatabaseConnectTimeout {
		ps = append(ps, Problem{Key: "database_connect_timeout", Value: t.DatabaseConnectTimeout, Reason: fmt.Sprintf("must be a duration between %v and %v, such as 10s", MinDatabaseConnectTimeout, MaxDatabaseConnectTimeout)})
	}
	if t.DatabaseURL == "" {
		ps = append(ps, Problem{Key: "database_url", Value: `""`, Reason: "required: a PostgreSQL URL such as postgres://user@host:5432/db"})
	} else if u, err := url.Parse(t.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		ps = append(ps, Problem{Key: "database_url", Value: Redact(t.DatabaseURL), Reason: "must be a postgres:// or postgresql:// URL"})
	}
	if u, err := url.Parse(t.AMQPURL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		ps = append(ps, Problem{Key: "amqp_url", Value: Redact(t.AMQPURL), Reason: "must be an amqp:// or amqps:// URL"})
	}
	if strings.TrimSpace(t.AMQPExchange) == "" {
		ps = append(ps, Problem{Key: "amqp_exchange", Value: `""`, Reason: "required: the topic exchange events are published to"})
	}
	host, addrErr := checkListenAddr(t.HTTPAddr)
	if addrErr != "" {
		ps = append(ps, Problem{Key: "http_addr", Value: t.HTTPAddr, Reason: addrErr})
	}
	token := t.AdminToken
	switch {
	case token != "" && (strings.TrimSpace(token) != token || len(token) < MinAdminTokenLength):
		ps = append(ps, Problem{Key: "admin_token", Value: token,
			Reason: fmt.Sprintf("must be at least %d characters with no leading or trailing whitespace (a random token, e.g. openssl rand -hex 32)", MinAdminTokenLength)})
	case token == "" && addrErr == "" && !isLoopback(host):
		ps = append(ps, Problem{Key: "admin_token", Value: `""`,
			Reason: "required when http_addr is not a loopback address: the admin API can re-publish events", Related: []string{"http_addr"}})
	}
	return ps
}

// pruneProblems checks the sweep's batch bounds.
func (t Transport) pruneProblems() []Problem {
	var ps []Problem
	if t.PruneBatchSize < 1 || t.PruneBatchSize > MaxPruneBatchSize {
		ps = append(ps, Problem{Key: "prune_batch_size", Value: t.PruneBatchSize, Reason: fmt.Sprintf("must be between 1 and %d", MaxPruneBatchSize)})
	}
	if t.PruneCycleCap < int64(t.PruneBatchSize) || t.PruneCycleCap < 1 || t.PruneCycleCap > MaxPruneCycleCap {
		ps = append(ps, Problem{Key: "prune_cycle_cap", Value: t.PruneCycleCap,
			Reason:  fmt.Sprintf("must be between prune_batch_size (%d) and %d: the cap is the guard against a clock jump mass-deleting", t.PruneBatchSize, MaxPruneCycleCap),
			Related: []string{"prune_batch_size"}})
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"prune_statement_timeout", t.PruneStatementTimeout}, {"prune_lock_timeout", t.PruneLockTimeout}} {
		if d.v < time.Millisecond || d.v > MaxPruneTimeout {
			ps = append(ps, Problem{Key: d.key, Value: d.v, Reason: fmt.Sprintf("must be a duration between 1ms and %v, such as 30s", MaxPruneTimeout)})
		}
	}
	ps = append(ps, t.pacingProblems()...)
	if t.PlanCheckSeqScanRows < 0 || t.PlanCheckSeqScanRows > MaxPlanCheckSeqScanRows {
		ps = append(ps, Problem{Key: "plan_check_seqscan_rows", Value: t.PlanCheckSeqScanRows, Reason: fmt.Sprintf("must be between 0 (warn on any sequential scan) and %d", int64(MaxPlanCheckSeqScanRows))})
	}
	return ps
}

// pacingProblems checks the sweep's pacing bounds (prune.Pacing).
func (t Transport) pacingProblems() []Problem {
	var ps []Problem
	if t.PruneMaxReplicaLag < 0 || t.PruneMaxReplicaLag > prune.MaxMaxReplicaLag {
		ps = append(ps, Problem{Key: "prune_max_replica_lag", Value: t.PruneMaxReplicaLag, Reason: fmt.Sprintf("must be a duration between 0 (no check) and %v, such as 10s", prune.MaxMaxReplicaLag)})
	}
	if t.PruneMaxWALBytesPerSecond < 0 || t.PruneMaxWALBytesPerSecond > prune.MaxMaxWALBytesPerSecond {
		ps = append(ps, Problem{Key: "prune_max_wal_bytes_per_second", Value: t.PruneMaxWALBytesPerSecond, Reason: fmt.Sprintf("must be between 0 (no bound) and %d bytes per second", int64(prune.MaxMaxWALBytesPerSecond))})
	}
	if t.PruneMaxPause < time.Second || t.PruneMaxPause > prune.MaxMaxPause {
		ps = append(ps, Problem{Key: "prune_max_pause", Value: t.PruneMaxPause, Reason: fmt.Sprintf("must be a duration between 1s and %v, such as 1m", prune.MaxMaxPause)})
	}
	if t.VacuumHorizonMaxHeld < 0 || t.VacuumHorizonMaxHeld > MaxVacuumHorizonMaxHeld {
		ps = append(ps, Problem{Key: "vacuum_horizon_max_held", Value: t.VacuumHorizonMaxHeld, Reason: fmt.Sprintf("must be a duration between 0s (no check) and %v, such as 1h", MaxVacuumHorizonMaxHeld)})
	}
	if t.VacuumSlotMaxRetainedWALBytes < 0 || t.VacuumSlotMaxRetainedWALBytes > MaxVacuumSlotMaxRetainedWALBytes {
		ps = append(ps, Problem{Key: "vacuum_slot_max_retained_wal_bytes", Value: t.VacuumSlotMaxRetainedWALBytes, Reason: fmt.Sprintf("must be between 0 (no check) and %d bytes", int64(MaxVacuumSlotMaxRetainedWALBytes))})
	}
	if t.VacuumDeadTuplesMax < 0 || t.VacuumDeadTuplesMax > MaxVacuumDeadTuplesMax {
		ps = append(ps, Problem{Key: "vacuum_dead_tuples_max", Value: t.VacuumDeadTuplesMax, Reason: fmt.Sprintf("must be between 0 (no check) and %d", int64(MaxVacuumDeadTuplesMax))})
	}
	return ps
}

// WindowProblems checks one retention window: 0 (disabled) to
// MaxRetentionDays.
func WindowProblems(key string, days int) []Problem {
	if days < 0 || days > MaxRetentionDays {
		return []Problem{{Key: key, Value: days, Reason: fmt.Sprintf("must be between 0 (sweep disabled) and %d days", MaxRetentionDays)}}
	}
	return nil
}

// LoopbackAddr reports whether a listen address host:port binds loopback
// only.
func LoopbackAddr(addr string) bool {
	host, reason := checkListenAddr(addr)
	return reason == "" && isLoopback(host)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkListenAddr returns the host of a listen address host:port and "" or
// why it is not one: the port must be decimal digits in 0..65535 (0 picks a
// free port), not a service name; the host an IP address, a name or empty
// (every interface).
func checkListenAddr(addr string) (host, reason string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "must be host:port to listen on, such as 127.0.0.1:8080"
	}
	n, err := strconv.Atoi(port)
	if err != nil || !decimalInt.MatchString(port) || strings.HasPrefix(port, "+") || n < 0 || n > 65535 {
		return "", "the port must be a number between 0 and 65535 (not a service name)"
	}
	if host != "" && net.ParseIP(host) == nil && !validHostname(host) {
		return "", "the host must be an IP address or a host name"
	}
	return host, ""
}

// validHostname reports whether h is a DNS name (letters, digits, hyphens
// and dots, labels of 1..63 characters).
func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' {
				return false
			}
		}
	}
	return true
}
