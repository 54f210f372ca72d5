package archive

import (
	"fmt"
	"time"

	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

// Defaults of the archive settings (key prefix "archive.").
const (
	// DefaultHotWindowDays keeps 90 days of audit rows in the database,
	// where the services' own queries expect them.
	DefaultHotWindowDays = 90
	// DefaultIntervalSeconds runs a scheduled pass hourly.
	DefaultIntervalSeconds = 3600
	// MaxIntervalSeconds is a week: a longer gap lets the hot table grow
	// past what its queries were sized for.
	MaxIntervalSeconds = 7 * 24 * 3600
	// DefaultBatchSize rows per archive object: small enough that one
	// delete transaction stays short, large enough that objects are few.
	DefaultBatchSize = 1000
	// DefaultMaxBatchBytes caps one NDJSON object at 32 MiB, which bounds
	// the archiver's memory to about twice that at any table size.
	DefaultMaxBatchBytes int64 = 32 << 20
	// DefaultScheduledBudget is the batches one scheduled pass may run:
	// about 120k rows an hour at the default batch size.
	DefaultScheduledBudget = 120
	// DefaultManualBudget is the batches one `archive run` runs unless told.
	DefaultManualBudget = 8
	// MaxManualBudget bounds `archive run --budget` (and the API's budget):
	// the API's default budget, one scheduled pass's worth.
	MaxManualBudget = 120
	// MaxMaxBatchBytes is the store's object cap (5 GiB, S3's single-put
	// limit); the boot probe checks the store's own cap as well.
	MaxMaxBatchBytes int64 = 5 << 30
	// DefaultDetectionLookbackDays is how far back the detection queries
	// that read the hot tables look; a hot window
	// shorter than it archives rows those queries still expect to find.
	DefaultDetectionLookbackDays = 30
	// DefaultVerifyIntervalHours runs a verification of the archives a day
	// (deep once a week): a store that lost or changed an object is noticed
	// within a day, its contents within a week.
	DefaultVerifyIntervalHours = 24
	// MaxVerifyIntervalHours is a month.
	MaxVerifyIntervalHours = 720
	// DefaultDBTimeout bounds one database step of a pass: a 10,000-row
	// batch selects in well under a second and its delete transaction takes
	// about 25 ms (bench), so two minutes only ends a database that stopped
	// answering (the fault suite freezes one mid-pass).
	DefaultDBTimeout = 2 * time.Minute
	// MinDBTimeout and MaxDBTimeout bound it: under a second a busy
	// server's select fails; over an hour a hung pass holds the lease for
	// longer than any operator waits.
	MinDBTimeout = time.Second
	MaxDBTimeout = time.Hour
	// DefaultStoreRequestTimeout bounds each store request (store.Open).
	DefaultStoreRequestTimeout = store.DefaultRequestTimeout
	// MinStoreRequestTimeout and MaxStoreRequestTimeout bound it: a put of
	// max_batch_bytes needs seconds, and a hung store must not hold the
	// archive lease for longer than ten minutes a request.
	MinStoreRequestTimeout = time.Second
	MaxStoreRequestTimeout = 10 * time.Minute
)

// Settings are a service's archive settings. The archiver is OFF unless an
// operator turns it on (consent, ADR-058).
type Settings struct {
	// Enabled is the consent knob: no worker, no probe and no manual run
	// unless true.
	Enabled bool `koanf:"enabled"`
	// HotWindowDays: rows older than this are archived.
	HotWindowDays int `koanf:"hot_window_days"`
	// IntervalSeconds between scheduled passes; 0 disables the scheduled
	// worker (manual runs only).
	IntervalSeconds int `koanf:"interval_seconds"`
	// BatchSize is the most rows per archive object.
	BatchSize int `koanf:"batch_size"`
	// MaxBatchBytes is the most bytes per archive object; validated against
	// the store's cap at boot.
	MaxBatchBytes int64 `koanf:"max_batch_bytes"`
	// Store is where archives go.
	Store StoreSettings `koanf:"store"`
	// DetectionLookbackDays is the look-back of the detection queries over
	// the hot tables; boot WARNs when the hot window is shorter.
	DetectionLookbackDays int `koanf:"detection_lookback_days"`
	// Purge configures the archive API's purge.
	Purge PurgeSettings `koanf:"purge"`
	// VerifyIntervalHours between scheduled verifications of the archives
	// (deep once a week); 0 disables them.
	VerifyIntervalHours int `koanf:"verify_interval_hours"`
	// DBTimeout bounds each database step of an archive pass (taking the
	// lease, a batch's select, its delete transaction): a database that
	// stops answering ends the pass with an error instead of hanging it.
	DBTimeout time.Duration `koanf:"db_timeout"`
	// SubjectKeyFile is a file holding the subject key (at least 32 bytes;
	// surrounding whitespace is not key material): the subject index,
	// subject holds and subject reads hash subjects with it
	// (HMAC-SHA256), so the index never lists a case in clear. Use one key
	// for the whole fleet: subject holds are compared across services by
	// their hashes. Empty: archives are booked unindexed and the subject
	// API answers 503 until a key is set and the backfill has run.
	SubjectKeyFile string `koanf:"subject_key_file"`
}

// SubjectKey loads the subject key; the zero Key when none is configured.
func (s Settings) SubjectKey() (subject.Key, error) {
	if s.SubjectKeyFile == "" {
		return subject.Key{}, nil
	}
	return subject.LoadKey(s.SubjectKeyFile)
}

// PurgeSettings configure the purge (archive.purge.*).
type PurgeSettings struct {
	// ApprovalsRequired is 0 (a purge executes at once) or 1 (dual control:
	// a purge freezes its list and another operator approves it).
	ApprovalsRequired int `koanf:"approvals_required"`
}

// StoreSettings name the object store.
type StoreSettings struct {
	// URL is a gocloud bucket URL, e.g.
	// s3://craig-archive?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true&disable_https=true
	URL string `koanf:"url"`
	// RequestTimeout bounds every request to the store.
	RequestTimeout time.Duration `koanf:"request_timeout"`
}

// DefaultSettings returns the archive defaults: disabled.
func DefaultSettings() Settings {
	return Settings{
		HotWindowDays:   DefaultHotWindowDays,
		IntervalSeconds: DefaultIntervalSeconds,
		BatchSize:       DefaultBatchSize,
		MaxBatchBytes:   DefaultMaxBatchBytes,
		Store:           StoreSettings{RequestTimeout: DefaultStoreRequestTimeout},

		DetectionLookbackDays: DefaultDetectionLookbackDays,
		VerifyIntervalHours:   DefaultVerifyIntervalHours,
		DBTimeout:             DefaultDBTimeout,
	}
}

// DetectionWindowWarning says, when the hot window is shorter than the
// detection look-back, what an operator must know (naming both keys);
// "" when it is not.
func (s Settings) DetectionWindowWarning() string {
	if s.HotWindowDays >= s.DetectionLookbackDays {
		return ""
	}
	return fmt.Sprintf("archive.hot_window_days (%d) is shorter than archive.detection_lookback_days (%d): "+
		"detection queries over the hot tables will miss rows already archived", s.HotWindowDays, s.DetectionLookbackDays)
}

// Interval is IntervalSeconds as a duration.
func (s Settings) Interval() time.Duration { return time.Duration(s.IntervalSeconds) * time.Second }

// Problems validates the archive keys (named with their "archive." prefix).
func (s Settings) Problems() []settings.Problem {
	var ps []settings.Problem
	if s.HotWindowDays < MinHotWindowDays || s.HotWindowDays > MaxHotWindowDays {
		ps = append(ps, settings.Problem{Key: "archive.hot_window_days", Value: s.HotWindowDays, Reason: fmt.Sprintf("must be between %d and %d days", MinHotWindowDays, MaxHotWindowDays)})
	}
	if s.IntervalSeconds < 0 || s.IntervalSeconds > MaxIntervalSeconds {
		ps = append(ps, settings.Problem{Key: "archive.interval_seconds", Value: s.IntervalSeconds, Reason: fmt.Sprintf("must be between 0 (no scheduled passes) and %d", MaxIntervalSeconds)})
	}
	if s.BatchSize < MinBatchSize || s.BatchSize > MaxBatchSize {
		ps = append(ps, settings.Problem{Key: "archive.batch_size", Value: s.BatchSize, Reason: fmt.Sprintf("must be between %d and %d rows", MinBatchSize, MaxBatchSize)})
	}
	if s.MaxBatchBytes < MinMaxBatchBytes || s.MaxBatchBytes > MaxMaxBatchBytes {
		ps = append(ps, settings.Problem{Key: "archive.max_batch_bytes", Value: s.MaxBatchBytes, Reason: fmt.Sprintf("must be between %d bytes and %d (the store's object cap)", MinMaxBatchBytes, MaxMaxBatchBytes)})
	}
	if s.DBTimeout < MinDBTimeout || s.DBTimeout > MaxDBTimeout {
		ps = append(ps, settings.Problem{Key: "archive.db_timeout", Value: s.DBTimeout, Reason: fmt.Sprintf("must be a duration between %v and %v, such as 2m", MinDBTimeout, MaxDBTimeout)})
	}
	if s.Store.RequestTimeout < MinStoreRequestTimeout || s.Store.RequestTimeout > MaxStoreRequestTimeout {
		ps = append(ps, settings.Problem{Key: "archive.store.request_timeout", Value: s.Store.RequestTimeout, Reason: fmt.Sprintf("must be a duration between %v and %v, such as 60s", MinStoreRequestTimeout, MaxStoreRequestTimeout)})
	}
	if s.DetectionLookbackDays < 0 || s.DetectionLookbackDays > MaxHotWindowDays {
		ps = append(ps, settings.Problem{Key: "archive.detection_lookback_days", Value: s.DetectionLookbackDays, Reason: fmt.Sprintf("must be between 0 (no detection queries) and %d days", MaxHotWindowDays)})
	}
	if s.VerifyIntervalHours < 0 || s.VerifyIntervalHours > MaxVerifyIntervalHours {
		ps = append(ps, settings.Problem{Key: "archive.verify_interval_hours", Value: s.VerifyIntervalHours, Reason: fmt.Sprintf("must be between 0 (no scheduled verification) and %d hours", MaxVerifyIntervalHours)})
	}
	if s.Purge.ApprovalsRequired < 0 || s.Purge.ApprovalsRequired > 1 {
		ps = append(ps, settings.Problem{Key: "archive.purge.approvals_required", Value: s.Purge.ApprovalsRequired, Reason: "must be 0 (direct purge) or 1 (another operator approves)"})
	}
	if s.SubjectKeyFile != "" {
		if _, err := subject.LoadKey(s.SubjectKeyFile); err != nil {
			ps = append(ps, settings.Problem{Key: "archive.subject_key_file", Value: s.SubjectKeyFile, Reason: fmt.Sprintf("must name a readable file of at least %d bytes: %v", subject.MinKeyBytes, err)})
		}
	}
	if s.Store.URL != "" {
		if err := store.CheckURL(s.Store.URL); err != nil {
			ps = append(ps, settings.Problem{Key: "archive.store.url", Value: s.Store.URL, Reason: err.Error()})
		}
	}
	if s.Enabled && s.Store.URL == "" {
		ps = append(ps, settings.Problem{Key: "archive.store.url", Value: `""`, Reason: "required when archive.enabled is true: the bucket URL archives are written to", Related: []string{"archive.enabled"}})
	}
	return ps
}
