//go:build faults

package faults_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/faults"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/rules"
)

// extremeRows are rule_evaluations at the edges: -infinity, a BC date, the
// year 1, a far future (never aged), and one row larger than the object cap
// (quarantined, kept).
const extremeRows = `INSERT INTO rule_evaluations AS t (evaluated_at, rule_id, input, output) VALUES
	('-infinity', 'edge', '{"case": "neg_inf"}', '{}'),
	('0044-03-15 00:00:00+00 BC', 'edge', '{"case": "bc"}', '{}'),
	('0001-01-01 00:00:00+00', 'edge', '{"case": "year_1"}', '{}'),
	('294276-12-31 23:59:59+00', 'edge', '{"case": "far_future"}', '{}'),
	('infinity', 'edge', '{"case": "pos_inf"}', '{}'),
	(now() - interval '100 days', 'edge', jsonb_build_object('pad', repeat('x', $1::int)), '{}')
	RETURNING t.id, to_jsonb(t)::text, t.evaluated_at > now() - interval '90 days' OR t.rule_id = 'edge' AND t.input ? 'pad'`

// TestExtremeRows: an archive pass over rows at the edges of time and size
// (the real binary): aged ones archived verbatim or kept, future ones and
// the oversized one kept; nothing lost; the pass reports the quarantine.
func TestExtremeRows(t *testing.T) {
	t.Parallel()
	bin := binary(t, "rules")
	w := newRulesWorld(t)
	tl := newTally("bad_input", "extreme rows")
	const maxBytes = 64 << 10
	rows, err := w.Pool.Query(context.Background(), extremeRows, maxBytes*2)
	require.NoError(t, err)
	for rows.Next() {
		var id [16]byte
		var doc string
		var keep bool
		require.NoError(t, rows.Scan(&id, &doc, &keep))
		if keep {
			w.Hot[id] = doc
		} else {
			w.Aged[id] = doc
		}
	}
	require.NoError(t, rows.Err())
	w.seed(t, 50, 5)
	res := runProcess(t, bin, w.env(settings.EnvVar(rules.Name, "archive.max_batch_bytes")+"=65536"), 2*time.Minute, "archive", "run", "--budget", "10", "--json")
	tl.Rounds++
	tl.Faults["extreme_rows"] += 6
	require.Contains(t, []int{0, 1}, res.code, res.stderr)
	var rep struct {
		Tables []struct {
			Archived    int64 `json:"archived"`
			Quarantined int   `json:"quarantined"`
		} `json:"tables"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(res.stdout)), &rep), res.stdout+res.stderr)
	require.Equal(t, 1, rep.Tables[0].Quarantined, "the oversized row is quarantined (kept): %s", res.stderr)
	check(t, w.World, tl, faults.CheckOptions{})
	require.Equal(t, int64(3), w.db.Count(t, `SELECT count(*) FROM rule_evaluations WHERE rule_id = 'edge'`),
		"kept: the far future, +infinity and the oversized row; archived: -infinity, BC and the year 1")
	tl.write(t)
}

// TestBadRequests: the archive API of a running serve, sent malformed and
// oversized bodies, trailing data, unknown fields, and tokens that are
// missing, garbage, wrongly signed, expired, unsigned or of a reserved
// actor: each refused with 400, 413 or 401, and nothing changes.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	bin := binary(t, "rules")
	w := newRulesWorld(t)
	w.seed(t, 300, 5)
	s := startServe(t, bin, w.env())
	tl := newTally("bad_input", "API requests")
	good := token(t, "ops:faults", "archive:run archive:purge archive:hold archive:read")
	sign := func(key string, claims jwt.MapClaims, m jwt.SigningMethod) string {
		var k any = []byte(key)
		if m == jwt.SigningMethodNone {
			k = jwt.UnsafeAllowNoneSignatureType
		}
		tok, err := jwt.NewWithClaims(m, claims).SignedString(k)
		require.NoError(t, err)
		return tok
	}
	exp := time.Now().Add(time.Hour).Unix()
	tokens := map[string]string{
		"none":           "",
		"garbage":        "not.a.jwt",
		"other key":      sign("another-secret-0123456789abcdef0123456789", jwt.MapClaims{"sub": "ops:x", "scope": "archive:run", "exp": exp}, jwt.SigningMethodHS256),
		"expired":        sign(apiSecret, jwt.MapClaims{"sub": "ops:x", "scope": "archive:run", "exp": time.Now().Add(-time.Hour).Unix()}, jwt.SigningMethodHS256),
		"alg none":       sign("", jwt.MapClaims{"sub": "ops:x", "scope": "archive:run", "exp": exp}, jwt.SigningMethodNone),
		"reserved actor": sign(apiSecret, jwt.MapClaims{"sub": "system:retention", "scope": "archive:run", "exp": exp}, jwt.SigningMethodHS256),
		"no exp":         sign(apiSecret, jwt.MapClaims{"sub": "ops:x", "scope": "archive:run"}, jwt.SigningMethodHS256),
		"HS512 same key": sign(apiSecret, jwt.MapClaims{"sub": "ops:x", "scope": "archive:run", "exp": exp}, jwt.SigningMethodHS512),
	}
	for name, tok := range tokens {
		code, _, err := s.post(context.Background(), "/admin/archive/run", tok, `{"budget": 1}`)
		require.NoError(t, err)
		tl.Rounds++
		tl.Faults["bad_token"]++
		require.Equal(t, http.StatusUnauthorized, code, name)
	}
	bodies := map[string]string{
		"not JSON":      `{budget: 1`,
		"trailing data": `{"budget": 1} {"budget": 2}`,
		"unknown field": `{"budget": 1, "force": true}`,
		"wrong type":    `{"budget": "1"}`,
		"out of range":  `{"budget": 100000}`,
		"negative":      `{"budget": -1}`,
		"oversized":     `{"budget": 1, "pad": "` + strings.Repeat("x", 200<<10) + `"}`,
		"a JSON array":  `[1]`,
		"a number":      `1e400`,
		"purge limit 0": `{"limit": 0}`,
	}
	for name, body := range bodies {
		path := "/admin/archive/run"
		if strings.HasPrefix(name, "purge") {
			path = "/admin/archive/purge"
		}
		code, out, err := s.post(context.Background(), path, good, body)
		require.NoError(t, err)
		tl.Rounds++
		tl.Faults["bad_body"]++
		require.Contains(t, []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge}, code, "%s: %s", name, out)
	}
	s.stop(t)
	require.Zero(t, w.db.Count(t, `SELECT count(*) FROM archive_ledger`), "no refused request archived anything")
	check(t, w.World, tl, faults.CheckOptions{})
	tl.write(t)
}
