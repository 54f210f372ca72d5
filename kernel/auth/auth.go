// Package auth authenticates the operators of a service's archive API:
// JWT bearer tokens (github.com/golang-jwt/jwt/v5) verified against one
// configured key — an HS256 secret, a PEM public key (RS256, ES256 or
// EdDSA, by the key's type) or a JWKS file (each key's algorithm from its
// type, selected by kid) — with exactly the algorithms that key allows, `exp`
// required, `iss` and `aud` checked when configured and 60 s of leeway. The
// token's `sub` is the actor; its `scope` claim (space-separated) grants
// the archive scopes.
package auth

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/craig/retention/kernel/identity"

	"github.com/golang-jwt/jwt/v5"
)

// The archive API's scopes.
const (
	ScopeRead  = "archive:read"
	ScopeRun   = "archive:run"
	ScopePurge = "archive:purge"
	ScopeHold  = "archive:hold"
	// ScopeSeal seals and unseals subjects (court orders).
	ScopeSeal = "archive:seal"
	// ScopeSealedRead reads a sealed subject's rows, with the order that
	// allows it named in the X-Craig-Order-Ref header.
	ScopeSealedRead = "archive:sealed-read"
	// ScopeSchedule proposes and approves records schedule versions
	// (ADR-073); an approval that brings destruction nearer also needs
	// ScopePurge.
	ScopeSchedule = "records:schedule"
	// ScopeEvents records case events by hand (a correction of the clock
	// the inbox's case events keep).
	ScopeEvents = "records:events"
	// ScopeReview lists what the records schedule makes due (ADR-073).
	ScopeReview = "records:review"
	// ScopeOutboxRead lists the outbox's dead letters (ADR-075).
	ScopeOutboxRead = "outbox:read"
	// ScopeOutboxRetry returns a dead letter to the drain (ADR-075).
	ScopeOutboxRetry = "outbox:retry"
)

// Leeway is the clock skew allowed on exp, nbf and iat.
const Leeway = 60 * time.Second

// MinSecretBytes is the shortest HS256 secret accepted: 32 bytes, the
// hash's output size (RFC 7518 §3.2 asks for at least that).
const MinSecretBytes = 32

// maxKeyFileBytes bounds a key file read at boot.
const maxKeyFileBytes = 1 << 20

// Reasons of a refused request: the label values of
// admin_auth_failures_total{reason}.
const (
	ReasonMissing   = "missing"
	ReasonMalformed = "malformed"
	ReasonExpired   = "expired"
	ReasonSignature = "signature"
	ReasonAlgorithm = "algorithm"
	ReasonIssuer    = "issuer"
	ReasonAudience  = "audience"
	ReasonClaims    = "claims"
	ReasonScope     = "insufficient_scope"
)

// Reasons are every refusal reason: the label values the admin metric
// exports from boot, at 0.
func Reasons() []string {
	return []string{ReasonMissing, ReasonMalformed, ReasonExpired, ReasonSignature, ReasonAlgorithm,
		ReasonIssuer, ReasonAudience, ReasonClaims, ReasonScope}
}

// ErrKey is wrapped by a key configuration that cannot be loaded.
var ErrKey = errors.New("auth: invalid key")

// Config names the verification key (at most one source) and the claims
// checked.
type Config struct {
	HS256Secret     string
	HS256SecretFile string
	PublicKeyFile   string
	JWKSFile        string
	Issuer          string
	Audience        string
}

// Configured reports whether any key is configured (without one the archive
// API is not served).
func (c Config) Configured() bool {
	return c.HS256Secret != "" || c.HS256SecretFile != "" || c.PublicKeyFile != "" || c.JWKSFile != ""
}

// Verifier checks bearer tokens.
type Verifier struct {
	keys    keySet
	algs    []string
	options []jwt.ParserOption
	now     func() time.Time
}

// NewVerifier loads the configured key. Errors name the file, never a
// key's bytes.
func NewVerifier(c Config) (*Verifier, error) {
	ks, err := loadKeys(c)
	if err != nil {
		return nil, err
	}
	v := &Verifier{keys: ks, algs: ks.algorithms(), now: time.Now}
	v.options = []jwt.ParserOption{jwt.WithValidMethods(v.algs), jwt.WithLeeway(Leeway), jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return v.now() })}
	if c.Issuer != "" {
		v.options = append(v.options, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		v.options = append(v.options, jwt.WithAudience(c.Audience))
	}
	return v, nil
}

// Algorithms are the algorithms the verifier accepts.
func (v *Verifier) Algorithms() []string { return slices.Clone(v.algs) }

// Principal is an authenticated operator.
type Principal struct {
	// Subject is the token's sub: the actor of everything the call does.
	Subject string
	Scopes  []string
}

// Has reports whether the principal holds scope.
func (p Principal) Has(scope string) bool { return slices.Contains(p.Scopes, scope) }

// Error is a refused token: Reason is the metric label.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return "auth: " + e.Reason + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// claims are the claims read from a token.
type claims struct {
	jwt.RegisteredClaims
	Scope string `json:"scope"`
}

// Verify checks a raw token and returns its principal.
func (v *Verifier) Verify(_ context.Context, raw string) (Principal, error) {
	if alg, ok := headerAlg(raw); ok && !slices.Contains(v.algs, alg) {
		return Principal{}, &Error{Reason: ReasonAlgorithm, Err: fmt.Errorf("alg %q is not one of %v", alg, v.algs)}
	}
	var c claims
	_, err := jwt.ParseWithClaims(raw, &c, v.keys.keyFunc, v.options...)
	if err != nil {
		return Principal{}, &Error{Reason: reasonOf(err), Err: err}
	}
	if err := numericTimes(raw); err != nil {
		return Principal{}, &Error{Reason: ReasonClaims, Err: err}
	}
	if strings.TrimSpace(c.Subject) == "" {
		return Principal{}, &Error{Reason: ReasonClaims, Err: errors.New("the token has no sub")}
	}
	if err := identity.Check(c.Subject); err != nil {
		return Principal{}, &Error{Reason: ReasonClaims, Err: fmt.Errorf("sub: %w", err)}
	}
	return Principal{Subject: c.Subject, Scopes: strings.Fields(c.Scope)}, nil
}

// headerAlg reads a token's alg without trusting anything else of it.
func headerAlg(raw string) (string, bool) {
	head, _, ok := strings.Cut(raw, ".")
	if !ok {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return "", false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(b, &h) != nil {
		return "", false
	}
	return h.Alg, true
}

func reasonOf(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return ReasonMalformed
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return ReasonExpired
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return ReasonSignature
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return ReasonAlgorithm
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return ReasonIssuer
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return ReasonAudience
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing), errors.Is(err, jwt.ErrTokenInvalidClaims):
		return ReasonClaims
	}
	return ReasonMalformed
}

// keySet is the configured verification key(s): by kid for a JWKS, one key
// otherwise.
type keySet struct {
	single *verifyKey
	byKid  map[string]verifyKey
}

// verifyKey is one key and the one algorithm it verifies.
type verifyKey struct {
	alg string
	key any
}

func (ks keySet) algorithms() []string {
	if ks.single != nil {
		return []string{ks.single.alg}
	}
	var out []string
	for _, k := range ks.byKid {
		if !slices.Contains(out, k.alg) {
			out = append(out, k.alg)
		}
	}
	slices.Sort(out)
	return out
}

// keyFunc gives the parser the key for a token: the one key, or the JWKS
// key its kid names; the token's alg must be that key's.
func (ks keySet) keyFunc(t *jwt.Token) (any, error) {
	k := ks.single
	if k == nil {
		kid, _ := t.Header["kid"].(string)
		found, ok := ks.byKid[kid]
		if !ok {
			return nil, fmt.Errorf("no key with kid %q", kid)
		}
		k = &found
	}
	if t.Method.Alg() != k.alg {
		return nil, fmt.Errorf("%w: alg %s, the key verifies %s", jwt.ErrTokenSignatureInvalid, t.Method.Alg(), k.alg)
	}
	return k.key, nil
}

// loadKeys loads the one configured key source.
func loadKeys(c Config) (keySet, error) {
	n := 0
	for _, set := range []bool{c.HS256Secret != "", c.HS256SecretFile != "", c.PublicKeyFile != "", c.JWKSFile != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return keySet{}, fmt.Errorf("%w: configure exactly one of the HS256 secret, the secret file, the public key file and the JWKS file (%d set)", ErrKey, n)
	}
	switch {
	case c.HS256Secret != "":
		return hmacKey([]byte(c.HS256Secret), "auth.jwt_hs256_secret")
	case c.HS256SecretFile != "":
		b, err := readBounded(c.HS256SecretFile)
		if err != nil {
			return keySet{}, err
		}
		return hmacKey([]byte(strings.TrimRight(string(b), "\r\n")), c.HS256SecretFile)
	case c.PublicKeyFile != "":
		b, err := readBounded(c.PublicKeyFile)
		if err != nil {
			return keySet{}, err
		}
		k, err := parsePublicPEM(b)
		if err != nil {
			return keySet{}, fmt.Errorf("%w: %s: %w", ErrKey, c.PublicKeyFile, err)
		}
		return keySet{single: &k}, nil
	}
	b, err := readBounded(c.JWKSFile)
	if err != nil {
		return keySet{}, err
	}
	byKid, err := parseJWKS(b)
	if err != nil {
		return keySet{}, fmt.Errorf("%w: %s: %w", ErrKey, c.JWKSFile, err)
	}
	return keySet{byKid: byKid}, nil
}

func hmacKey(secret []byte, where string) (keySet, error) {
	if len(secret) < MinSecretBytes {
		return keySet{}, fmt.Errorf("%w: %s: the HS256 secret must be at least %d bytes", ErrKey, where, MinSecretBytes)
	}
	return keySet{single: &verifyKey{alg: jwt.SigningMethodHS256.Alg(), key: secret}}, nil
}

// parsePublicPEM reads a PEM "PUBLIC KEY" and derives its algorithm.
func parsePublicPEM(b []byte) (verifyKey, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PUBLIC KEY" {
		return verifyKey{}, errors.New(`no PEM "PUBLIC KEY" block`)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return verifyKey{}, errors.New("not a PKIX public key")
	}
	return keyOf(k)
}

// keyOf is a public key with the one algorithm it verifies.
func keyOf(k crypto.PublicKey) (verifyKey, error) {
	switch pk := k.(type) {
	case *rsa.PublicKey:
		if pk.N.BitLen() < 2048 {
			return verifyKey{}, fmt.Errorf("RSA key of %d bits: at least 2048", pk.N.BitLen())
		}
		return verifyKey{alg: jwt.SigningMethodRS256.Alg(), key: pk}, nil
	case *ecdsa.PublicKey:
		if pk.Curve != elliptic.P256() {
			return verifyKey{}, errors.New("EC key not on P-256 (ES256)")
		}
		return verifyKey{alg: jwt.SigningMethodES256.Alg(), key: pk}, nil
	case ed25519.PublicKey:
		return verifyKey{alg: jwt.SigningMethodEdDSA.Alg(), key: pk}, nil
	}
	return verifyKey{}, fmt.Errorf("unsupported key type %T", k)
}

func readBounded(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	if len(b) > maxKeyFileBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrKey, path, maxKeyFileBytes)
	}
	return b, nil
}

// numericTimes refuses a (verified) token whose exp, iat or nbf is not a
// JSON number: RFC 7519 says NumericDate, and the JWT library would read
// "exp": "4102444800" (a string) as a time.
func numericTimes(raw string) error {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return errors.New("the token is not three segments")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	for _, k := range []string{"exp", "iat", "nbf"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		if b := bytes.TrimSpace(v); len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
			return fmt.Errorf("%s must be a JSON number (NumericDate), not %s", k, b)
		}
	}
	return nil
}
